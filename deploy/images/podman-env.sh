# Sourced by scripts/images and tests/deploy/pod_test.sh: podman settings that work on the
# machines this project runs on, unless CONTAINERS_CONF already names the caller's own.
# Measured there: the default runtime crun fails on hybrid cgroups (runc works), and runc
# cannot apply podman's default rlimits (RLIMIT_NOFILE/NPROC at the hard limit fail with EPERM),
# so both are pinned below it.
if [ -z "${CONTAINERS_CONF:-}" ]; then
  _relay_nofile=$(ulimit -Hn); [ "$_relay_nofile" = unlimited ] || [ "$_relay_nofile" -gt 16384 ] && _relay_nofile=16384
  _relay_nproc=$(ulimit -Hu); [ "$_relay_nproc" = unlimited ] || [ "$_relay_nproc" -gt 4096 ] && _relay_nproc=4096
  export CONTAINERS_CONF="${TMPDIR:-/tmp}/relay-containers.conf"
  cat >"$CONTAINERS_CONF" <<CONF
[containers]
default_ulimits = ["nofile=$_relay_nofile:$_relay_nofile", "nproc=$_relay_nproc:$_relay_nproc"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  unset _relay_nofile _relay_nproc
fi
