# examples/cluster (HAProxy + Redis + 2 `cedar serve` on loopback, a tiny model): session
# affinity, outputs equal to a single server's, failover; skipped (77) without haproxy or
# redis-server (scripts/setup.sh installs them).
add_test(NAME cluster_routing_test COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster/cluster_test.sh $<TARGET_FILE:cedar>)
set_tests_properties(cluster_routing_test PROPERTIES LABELS unit TIMEOUT 120 SKIP_RETURN_CODE 77)
