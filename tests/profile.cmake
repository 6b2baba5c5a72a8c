# cedar profile (profile/): trace parsing, the simulation over the real prefix cache, the report.
# Fixtures in tests/data/profile/; the real traces in ../shared/traces are used when present.
cedar_add_test(profile_test unit cedar_profile
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_trace_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_sim_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_report_test.cpp)
