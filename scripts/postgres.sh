#!/usr/bin/env bash
# Start a throwaway PostgreSQL on loopback for the database tests (installed from Debian's
# packages when absent) and print the SQLAlchemy URL to stdout. Stop it with:
#   su postgres -c "$(dirname "$(command -v initdb)")/pg_ctl -D DIR/data stop"
set -euo pipefail
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
dir=$(mktemp -d /tmp/kbflow-pg.XXXXXX)
chown postgres "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
su postgres -c "$bin/initdb -D $dir/data -A trust -U postgres" >&2
su postgres -c "$bin/pg_ctl -D $dir/data -o '-h 127.0.0.1 -p $port -k $dir' -l $dir/log -w start" >&2
echo "postgresql+psycopg://postgres@127.0.0.1:$port/postgres"
