#!/usr/bin/env bash
# bench/cpu_seconds.sh CMD [ARGS...]: run CMD; print its wall seconds and the whole machine's busy CPU seconds over it
# (user, nice, system, irq and softirq from /proc/stat: every process counts, Ray's workers, browsers and servers
# that CMD starts included, which per-process accounting misses). Run it on a quiet machine: others' work counts too.
# Exits with CMD's status.
set -uo pipefail
read -r _ user1 nice1 system1 _ _ irq1 softirq1 steal1 _ < /proc/stat
start=$(date +%s.%N)
"$@"
status=$?
read -r _ user2 nice2 system2 _ _ irq2 softirq2 steal2 _ < /proc/stat
end=$(date +%s.%N)
ticks=$(( (user2 + nice2 + system2 + irq2 + softirq2 + steal2) - (user1 + nice1 + system1 + irq1 + softirq1 + steal1) ))
python3 -c "import sys; print(f'[cpu-seconds] exit {sys.argv[1]}: {float(sys.argv[3]) - float(sys.argv[2]):.1f} s wall, '
f'{int(sys.argv[4]) / int(sys.argv[5]):.1f} CPU-s busy (whole machine)')" "$status" "$start" "$end" "$ticks" \
  "$(getconf CLK_TCK)" >&2
exit "$status"
