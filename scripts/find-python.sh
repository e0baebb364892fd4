#!/usr/bin/env bash
# Print the path of a working Python interpreter of the first version X.Y given that has one
# (default 3.12), or fail.
#
# Usage: scripts/find-python.sh [X.Y ...]     e.g. scripts/find-python.sh 3.13 3.12
#
# For each version in the order given, looks at: $PYTHON<XY> (e.g. PYTHON313) if set; pythonX.Y
# on PATH (skipped when it is a pyenv shim that does not run because another version is
# selected); every pyenv version X.Y.* under $(pyenv root), or ~/.pyenv, newest first;
# /usr/local/bin and /usr/bin. Each candidate must run and report version X.Y. These machines
# ship Python 3.12 and 3.13 as pyenv versions beside the selected 3.11, so the pyenv step is
# what finds them on a fresh machine.
set -uo pipefail

[ $# -eq 0 ] && set -- 3.12
root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-$HOME/.pyenv}")
works() { [ -x "$1" ] && [ "$("$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" = "$2" ]; }

tried=() variables=()
for want in "$@"; do
    var="PYTHON${want//./}"
    variables+=("$var")
    candidates=()
    [ -n "${!var:-}" ] && candidates+=("${!var}")
    found=$(command -v "python$want" 2>/dev/null) && candidates+=("$found")
    for dir in $(ls -d "$root"/versions/"$want".* 2>/dev/null | sort -Vr); do
        candidates+=("$dir/bin/python$want")
    done
    candidates+=("/usr/local/bin/python$want" "/usr/bin/python$want")
    for candidate in "${candidates[@]}"; do
        if works "$candidate" "$want"; then
            echo "$candidate"
            exit 0
        fi
    done
    tried+=("${candidates[@]}")
done
echo "find-python: no working Python $* (tried: ${tried[*]});" \
     "install one (e.g. 'pyenv install $1') or set ${variables[*]/%/=/path/to/python} (one of them)" >&2
exit 1
