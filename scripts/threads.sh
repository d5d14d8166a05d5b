# Sourced (not run) by scripts/demo.sh, scripts/test.sh, scripts/launch.sh and scripts/reproduce/env.sh: intra-op
# threads per process (OpenMP, MKL). One by default: the CPU models here are tiny, several processes often share
# the cores, and an OpenMP thread whose core another job holds spins at its barriers (the demo took 5x its CPU
# time with two threads and one busy core, issue 33). Raise it on a dedicated machine: MARLHF_THREADS=8 bash ...
# Python entry points run without these scripts apply the same default (dschat.core.entrypoint.apply_thread_default).
MARLHF_THREADS="${MARLHF_THREADS:-${OMP_NUM_THREADS:-1}}"
export MARLHF_THREADS OMP_NUM_THREADS="$MARLHF_THREADS" MKL_NUM_THREADS="$MARLHF_THREADS"
