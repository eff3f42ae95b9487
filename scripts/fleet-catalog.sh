#!/usr/bin/env bash
# The fleet's catalog: a real PostgreSQL server in a directory you choose, for a DuckLake lake.
#
#   scripts/fleet-catalog.sh start DIR [--port N] [--tls]   initdb (first time) and start
#   scripts/fleet-catalog.sh stop DIR                       stop it (fast shutdown)
#   scripts/fleet-catalog.sh status DIR                     running or not, and how to connect
#
# On the first start it creates, with `initdb` in DIR/pgdata:
#   - a server listening on 127.0.0.1 only (port 55432 unless --port), SCRAM-SHA-256 for every
#     connection (no `trust`, not even on the socket);
#   - the database `causeway_fleet`, owned by the role `causeway_ship` (shippers: creates the
#     lake's catalog tables and writes them), and the role `causeway_read` (`causeway mcp --lake`,
#     `causeway fleet ...`: SELECT only, on every table the shipping role creates, by default
#     privileges);
#   - random passwords for both roles in DIR/pgpass (mode 0600, libpq's password file format),
#     named in the lake strings (`passfile=DIR/pgpass`, or `export PGPASSFILE=DIR/pgpass`): no
#     password ever appears in a command line or a log;
#   - with --tls, a self-signed certificate (DIR/pgdata/server.{crt,key}) and `hostssl` only:
#     connect with `sslmode=require` (or `verify-full` and `sslrootcert=DIR/pgdata/server.crt`).
#   - DIR/data: the lake's Parquet files (a local directory; production uses shared storage).
# It prints the two lake strings (shipping, serving) for `--lake`.
#
# As root the server runs as the `postgres` user (PostgreSQL refuses to run as root); DIR is
# handed to that user.
set -euo pipefail

usage() { sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1 dir=$2; shift 2
port=55432 tls=0
while [ $# -gt 0 ]; do
  case $1 in
    --port) port=$2; shift 2 ;;
    --tls) tls=1; shift ;;
    *) usage ;;
  esac
done

pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pgbin" ] && [ -x "$pgbin/initdb" ] || {
  echo "fleet-catalog: PostgreSQL server binaries not found (apt-get install postgresql)" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pgdata=$dir/pgdata

as_pg() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
pgport() { sed -n 's/^port = \([0-9]*\).*/\1/p' "$pgdata/postgresql.auto.conf" "$pgdata/postgresql.conf" 2>/dev/null | tail -1; }

print_lakes() {
  local p; p=$(pgport)
  local ssl=""; grep -q '^ssl = on' "$pgdata/postgresql.conf" && ssl=" sslmode=require"
  echo "ship:  --lake 'postgres:host=127.0.0.1 port=$p dbname=causeway_fleet user=causeway_ship passfile=$dir/pgpass$ssl' --data-path $dir/data"
  echo "serve: --lake 'postgres:host=127.0.0.1 port=$p dbname=causeway_fleet user=causeway_read passfile=$dir/pgpass$ssl'"
}

case $cmd in
  start)
    if [ ! -f "$pgdata/PG_VERSION" ]; then
      mkdir -p "$pgdata" "$dir/data"
      umask 077
      ship_pw=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
      read_pw=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
      admin_pw=$(head -c 24 /dev/urandom | base64 | tr -d '/+=')
      pwfile=$(mktemp)
      printf '%s\n' "$admin_pw" > "$pwfile"
      if [ "$(id -u)" -eq 0 ]; then chown -R postgres: "$dir" "$pwfile"; fi
      as_pg "$pgbin/initdb" -D "$pgdata" -U causeway_admin --pwfile="$pwfile" \
        --auth=scram-sha-256 --encoding=UTF8 --locale=C >/dev/null
      rm -f "$pwfile"
      {
        echo "listen_addresses = '127.0.0.1'"
        echo "port = $port"
        echo "unix_socket_directories = '$pgdata'"
        echo "password_encryption = 'scram-sha-256'"
        echo "max_connections = 200"
      } | as_pg tee -a "$pgdata/postgresql.conf" >/dev/null
      hba=host
      if [ "$tls" = 1 ]; then
        as_pg openssl req -new -x509 -days 3650 -nodes -subj "/CN=127.0.0.1" \
          -out "$pgdata/server.crt" -keyout "$pgdata/server.key" >/dev/null 2>&1
        as_pg chmod 600 "$pgdata/server.key"
        echo "ssl = on" | as_pg tee -a "$pgdata/postgresql.conf" >/dev/null
        hba=hostssl
      fi
      {
        echo "local all all scram-sha-256"
        echo "$hba all all 127.0.0.1/32 scram-sha-256"
      } | as_pg tee "$pgdata/pg_hba.conf" >/dev/null
      {
        echo "127.0.0.1:$port:*:causeway_admin:$admin_pw"
        echo "127.0.0.1:$port:*:causeway_ship:$ship_pw"
        echo "127.0.0.1:$port:*:causeway_read:$read_pw"
      } > "$dir/pgpass"
      chmod 600 "$dir/pgpass"
      # the admin's one-time password file, readable by the server's user only, for the SQL below
      adminpass=$(mktemp)
      echo "*:$port:*:causeway_admin:$admin_pw" > "$adminpass"
      if [ "$(id -u)" -eq 0 ]; then chown postgres: "$adminpass"; fi
      as_pg "$pgbin/pg_ctl" -D "$pgdata" -l "$dir/postgres.log" -w start >/dev/null
      as_pg env PGPASSFILE="$adminpass" "$pgbin/psql" -X -q -v ON_ERROR_STOP=1 \
        -h "$pgdata" -p "$port" -U causeway_admin -d postgres <<SQL
CREATE ROLE causeway_ship LOGIN PASSWORD '$ship_pw';
CREATE ROLE causeway_read LOGIN PASSWORD '$read_pw';
CREATE DATABASE causeway_fleet OWNER causeway_ship;
\c causeway_fleet
REVOKE ALL ON SCHEMA public FROM PUBLIC;
GRANT ALL ON SCHEMA public TO causeway_ship;
GRANT USAGE ON SCHEMA public TO causeway_read;
ALTER DEFAULT PRIVILEGES FOR ROLE causeway_ship IN SCHEMA public GRANT SELECT ON TABLES TO causeway_read;
SQL
      rm -f "$adminpass"
      # the data directory: the shipping role's files, readable by the serving side
      if [ "$(id -u)" -eq 0 ]; then chown root: "$dir/pgpass" "$dir" "$dir/data"; fi
      chmod 755 "$dir"
      echo "fleet-catalog: created a catalog in $pgdata (port $port)" >&2
    elif ! as_pg "$pgbin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
      as_pg "$pgbin/pg_ctl" -D "$pgdata" -l "$dir/postgres.log" -w start >/dev/null
      echo "fleet-catalog: started $pgdata" >&2
    else
      echo "fleet-catalog: already running ($pgdata)" >&2
    fi
    print_lakes
    ;;
  stop)
    [ -f "$pgdata/PG_VERSION" ] || { echo "fleet-catalog: no catalog in $dir" >&2; exit 1; }
    as_pg "$pgbin/pg_ctl" -D "$pgdata" -m fast -w stop >/dev/null
    echo "fleet-catalog: stopped $pgdata" >&2
    ;;
  status)
    [ -f "$pgdata/PG_VERSION" ] || { echo "fleet-catalog: no catalog in $dir" >&2; exit 1; }
    if as_pg "$pgbin/pg_ctl" -D "$pgdata" status >/dev/null 2>&1; then
      echo "running: $pgdata (port $(pgport))"; print_lakes
    else
      echo "stopped: $pgdata"; exit 3
    fi
    ;;
  *) usage ;;
esac
