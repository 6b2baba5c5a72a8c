# cedar profile (profile/): trace parsing, the simulation over the real prefix cache, the report.
# Fixtures in tests/data/profile/; the real traces in ../shared/traces are used when present.
cedar_add_test(profile_test unit cedar_profile
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_trace_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_sim_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_report_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_arrival_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_cluster_test.cpp)

# cedar profile --live against an in-process `cedar serve` (tiny model, Unix socket): simulation
# and server agree on every request's hit tokens; errors and an unreachable server.
cedar_add_test(profile_live_test unit "cedar_profile_live;cedar_server"
  ${CMAKE_CURRENT_SOURCE_DIR}/profile_live_test.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/server_fixture.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/test_models.cpp)

# `cedar profile`'s command line (a shell script that runs the binary a dozen times, a few seconds).
add_test(NAME profile_cli_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cli/profile_args_test.sh $<TARGET_FILE:cedar>
         ${CMAKE_CURRENT_SOURCE_DIR}/data/profile)
set_tests_properties(profile_cli_test PROPERTIES LABELS unit TIMEOUT 120)
