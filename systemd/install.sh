#!/usr/bin/env bash
# Install session-supervisor as a systemd service (docs/systemd.md, "Install"). As root, from a clone:
#
#   systemd/install.sh [--wheel FILE] [--instance NAME]... [--start]
#
#   --wheel FILE     install this wheel (default: build one from the checkout this script is in)
#   --instance NAME  also set up session-supervisor@NAME: /etc/session-supervisor/NAME.toml, its
#                    credentials directory, its sockets, its check (repeatable)
#   --start          once the check passed, enable and start the service(s) too
#
# What it does, in order; each step can run again (an existing configuration or secret is never
# overwritten):
#   1. a virtual environment of its own, $PREFIX/venv (default /opt/session-supervisor/venv): Debian
#      12 refuses a system-wide pip install (PEP 668), and the import name 'supervisor' is also
#      supervisord's, so never --system-site-packages
#   2. the wheel (given, or built from this checkout with the venv's pip), installed into it
#   3. the units, into /etc/systemd/system, with ExecStart= (and ExecReload=) naming the venv's
#      console script
#   4. the sysusers file, then systemd-sysusers: the socket groups session-supervisor and
#      session-supervisor-admin
#   5. the example configuration, where none is yet, and the credentials directories (root only)
#   6. the state directory of an instance that an older template kept under
#      /var/lib/session-supervisor/NAME, moved to /var/lib/session-supervisor-NAME (the template's now)
#   7. the socket units enabled and started (they create /run/session-supervisor/), then
#      `run --check` with CREDENTIALS_DIRECTORY set as systemd sets it; --start: the service(s)
#
# Environment: PYTHON (default python3, >= 3.11), PREFIX (default /opt/session-supervisor).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SOURCE=$(dirname "$HERE")
PYTHON=${PYTHON:-python3}
PREFIX=${PREFIX:-/opt/session-supervisor}
VENV=$PREFIX/venv
PROGRAM=$VENV/bin/session-supervisor
ETC=/etc/session-supervisor
UNIT_DIR=/etc/systemd/system
SYSUSERS=/usr/lib/sysusers.d/session-supervisor.conf
STATE=/var/lib

say() { echo "install.sh: $*" >&2; }
fail() { say "error: $*"; exit 1; }
usage() { say "usage error: $* (see 'install.sh --help')"; exit 2; }

wheel='' start=0 instances=()
while [[ $# -gt 0 ]]; do
    case $1 in
        --wheel) [[ $# -ge 2 ]] || usage "--wheel needs a file"; wheel=$2; shift 2 ;;
        --instance) [[ $# -ge 2 ]] || usage "--instance needs a name"; instances+=("$2"); shift 2 ;;
        --start) start=1; shift ;;
        -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
        *) usage "unknown argument: $1" ;;
    esac
done
for name in "${instances[@]}"; do
    # the template's User=session-supervisor-%i: a user name of at most 31 characters, and never
    # a name sysusers or the plain unit already holds (docs/systemd.md, "Several instances")
    if [[ ! $name =~ ^[A-Za-z0-9_][A-Za-z0-9_-]{0,11}$ || $name == admin || $name == daemon ]]; then
        usage "--instance $name: an instance name is 1 to 12 letters, digits, - or _, not admin or daemon"
    fi
done
[[ -z $wheel || -f $wheel ]] || fail "--wheel $wheel: no such file"
[[ $(id -u) -eq 0 ]] || fail "run as root: it writes /etc, $PREFIX and the units"

# -- 1. the virtual environment ------------------------------------------------------------------
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
    || fail "$PYTHON: Python >= 3.11 is required"
if [[ ! -x $VENV/bin/python ]]; then
    # Debian's python3 makes a venv only with python3-venv (ensurepip) installed
    "$PYTHON" -c 'import ensurepip' 2>/dev/null \
        || fail "$PYTHON cannot make a virtual environment: apt-get install python3-venv"
    say "creating $VENV"
    "$PYTHON" -m venv "$VENV"
fi
pip=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)

# -- 2. the wheel ----------------------------------------------------------------------------------
if [[ -z $wheel ]]; then
    [[ -f $SOURCE/pyproject.toml ]] || fail "$SOURCE is not a checkout (no pyproject.toml): give --wheel FILE"
    build=$(mktemp -d)
    trap 'rm -rf "$build"' EXIT
    say "building a wheel from $SOURCE"
    "${pip[@]}" wheel --no-deps --wheel-dir "$build" "$SOURCE"
    wheel=$(find "$build" -name 'session_supervisor-*.whl' -print -quit)
    [[ -n $wheel ]] || fail "pip built no session_supervisor wheel from $SOURCE"
fi
say "installing $(basename "$wheel") into $VENV"
"${pip[@]}" install "$wheel"
# the same version again (a rebuilt checkout) is installed too; its dependencies are in place
"${pip[@]}" install --force-reinstall --no-deps "$wheel"
[[ -x $PROGRAM ]] || fail "$PROGRAM is missing after the install"

# -- 3. the units ----------------------------------------------------------------------------------
for unit in "$HERE"/session-supervisor*.service "$HERE"/session-supervisor-*.socket; do
    # whatever program path the shipped unit names, the installed one names this venv's
    sed -E "s#^(Exec(Start|Reload)=[-+!@:]*)[^ ]*/session-supervisor #\\1$PROGRAM #" "$unit" \
        >"$UNIT_DIR/$(basename "$unit").new"
    chmod 644 "$UNIT_DIR/$(basename "$unit").new"
    mv "$UNIT_DIR/$(basename "$unit").new" "$UNIT_DIR/$(basename "$unit")"
done
say "units installed in $UNIT_DIR (ExecStart=$PROGRAM)"

# -- 4. the socket groups --------------------------------------------------------------------------
install -D -m644 "$HERE/session-supervisor.sysusers.conf" "$SYSUSERS"
systemd-sysusers "$SYSUSERS"

# -- 5. configuration and credentials --------------------------------------------------------------
install -d -m755 "$ETC"
install -d -m700 "$ETC/credentials"
if [[ ! -e $ETC/supervisor.toml ]]; then
    install -m644 "$HERE/session-supervisor.example.toml" "$ETC/supervisor.toml"
    say "wrote the example configuration $ETC/supervisor.toml: edit it, and put the secrets it names in $ETC/credentials/"
fi
for name in "${instances[@]}"; do
    install -d -m700 "$ETC/credentials/$name"
    if [[ ! -e $ETC/$name.toml ]]; then
        # the instance's sockets are in /run/session-supervisor/NAME/ (the template's socket units)
        sed "s#/run/session-supervisor/#/run/session-supervisor/$name/#g" \
            "$HERE/session-supervisor.example.toml" >"$ETC/$name.toml"
        chmod 644 "$ETC/$name.toml"
        say "wrote the example configuration $ETC/$name.toml: edit it, and put its secrets in $ETC/credentials/$name/"
    fi
done

# -- 6. an instance's state directory the template renamed -----------------------------------------
# An older template kept StateDirectory=session-supervisor/NAME: under DynamicUser= that is
# /var/lib/private/session-supervisor/NAME, and it made the plain unit and the instances fail
# 238/STATE_DIRECTORY on one host. The template now keeps session-supervisor-NAME; the store moves
# there, for every NAME with a configuration /etc/session-supervisor/NAME.toml.
systemd_running=0
[[ -d /run/systemd/system ]] && systemd_running=1
for base in "$STATE/private/session-supervisor" "$STATE/session-supervisor"; do
    [[ -d $base && ! -L $base ]] || continue
    for old in "$base"/*/; do
        old=${old%/}
        name=$(basename "$old")
        [[ -d $old && ! -L $old && -f $ETC/$name.toml ]] || continue
        new=$STATE/private/session-supervisor-$name
        [[ $base == "$STATE/session-supervisor" ]] && new=$STATE/session-supervisor-$name
        if [[ -e $new || -L $STATE/session-supervisor-$name ]]; then
            say "warning: $old is left where it is: session-supervisor@$name already has $new"
            continue
        fi
        if [[ $systemd_running -eq 1 ]] && systemctl -q is-active "session-supervisor@$name.service"; then
            fail "session-supervisor@$name is running on $old: stop it (a handover), then run this script again"
        fi
        install -d -m700 "$(dirname "$new")"
        mv "$old" "$new"
        say "moved the state of session-supervisor@$name: $old -> $new"
    done
done
# what the old layout left: the symlinks into the moved directories, then the emptied directory the
# plain unit needs as its own symlink
if [[ -d $STATE/session-supervisor && ! -L $STATE/session-supervisor ]]; then
    find "$STATE/session-supervisor" -mindepth 1 -maxdepth 1 -xtype l -delete
    rmdir "$STATE/session-supervisor" 2>/dev/null || true
fi

# -- 7. sockets, the check, the start --------------------------------------------------------------
if [[ $systemd_running -eq 0 ]]; then
    say "systemd is not running here (no /run/systemd/system): the units are installed, not enabled;"
    say "once it runs: systemctl enable --now session-supervisor-subscribe.socket session-supervisor-control.socket,"
    say "then: CREDENTIALS_DIRECTORY=$ETC/credentials $PROGRAM run --config $ETC/supervisor.toml --check"
    exit 0
fi
systemctl daemon-reload
checks=("supervisor.toml:$ETC/credentials:session-supervisor")
for name in "${instances[@]}"; do
    checks+=("$name.toml:$ETC/credentials/$name:session-supervisor@$name")
done
failed=0 services=()
for check in "${checks[@]}"; do
    IFS=: read -r config credentials unit <<<"$check"
    # the sockets first: they create /run/session-supervisor/ (and NAME/), which the check looks at
    systemctl enable --now "${unit/session-supervisor/session-supervisor-subscribe}.socket" \
        "${unit/session-supervisor/session-supervisor-control}.socket"
    # as the service will see its files: LoadCredential= puts them in $CREDENTIALS_DIRECTORY
    if CREDENTIALS_DIRECTORY=$credentials "$PROGRAM" run --config "$ETC/$config" --check; then
        services+=("$unit.service")
    else
        say "error: $ETC/$config: the check failed (the line above); fix it, then run this script again"
        failed=1
    fi
done
[[ $failed -eq 0 ]] || exit 1
if [[ $start -eq 1 ]]; then
    systemctl enable --now "${services[@]}"
    say "started: ${services[*]}"
else
    say "checked; start it with: systemctl enable --now ${services[*]}"
fi
