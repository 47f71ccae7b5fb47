# Sourced by the bench/*.sh scripts: the line a benchmark prints for each of its targets, which
# bench/all.sh collects (bench/targets.py is the same for the Python ones).

# target NAME MEASURED OP THRESHOLD [UNIT]: "TARGET native GET / iperf3: 0.91x (>= 0.85x) met".
# OP is >= or <=.
target() {
  awk -v n="$1" -v m="$2" -v op="$3" -v t="$4" -v u="${5:-x}" 'BEGIN {
    ok = (op == ">=") ? (m + 0 >= t + 0) : (m + 0 <= t + 0)
    printf "TARGET %s: %.2f%s (%s %s%s) %s\n", n, m, u, op, t, u, ok ? "met" : "NOT MET" }'
}
# not_measured NAME REASON: a target this run could not measure, and why.
not_measured() { echo "TARGET $1: not measured: $2"; }
