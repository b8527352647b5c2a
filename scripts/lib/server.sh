# Sourced by the server scripts (ab-server.sh, perf-server.sh, stat-server.sh).

# Waits up to 10 s for a server on port $1 to answer PING.
wait_for_server() {
    for _ in $(seq 100); do
        redis-cli -p "$1" ping >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 0
}
