# Sourced by the VM scripts that start a server in the background and then its client
# (bench.sh, rxe-selftest.sh).

# listening PORT: is a TCP socket listening on PORT (state 0A in /proc/net/tcp)?
listening() { grep -qi ":$(printf %04X "$1") 00000000:0000 0A" /proc/net/tcp; }

# wait_listening PORT TENTHS: wait until PORT listens, at most TENTHS tenths of a second
# (the client then runs either way and reports a server that never came up).
wait_listening() {
    _n=$2
    until listening "$1" || [ "$_n" -le 0 ]; do
        sleep 0.1
        _n=$((_n - 1))
    done
}
