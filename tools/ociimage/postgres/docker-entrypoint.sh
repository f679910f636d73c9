#!/usr/bin/env bash
# Entrypoint of the PostgreSQL 15 image built by scripts/image.sh from
# Debian's postgresql-15. It honours the interface of the official
# postgres image: POSTGRES_USER (default postgres), POSTGRES_PASSWORD (or
# POSTGRES_PASSWORD_FILE; required unless POSTGRES_HOST_AUTH_METHOD=trust),
# POSTGRES_DB (default $POSTGRES_USER), PGDATA, POSTGRES_INITDB_ARGS,
# POSTGRES_HOST_AUTH_METHOD (default scram-sha-256) and the scripts in
# /docker-entrypoint-initdb.d (*.sh, *.sql, *.sql.gz). Started as root it
# fixes the ownership of PGDATA and re-executes itself as postgres; on an
# empty data directory it runs initdb, then execs postgres in the foreground
# listening on 0.0.0.0:5432 with password authentication.
set -Eeuo pipefail

# file_env VAR: VAR may instead be given as a path in VAR_FILE (secrets).
file_env() {
	local var=$1 file_var="${1}_FILE" def=${2:-}
	if [ -n "${!var:-}" ] && [ -n "${!file_var:-}" ]; then
		echo >&2 "error: both $var and $file_var are set (but are exclusive)"
		exit 1
	fi
	local val=$def
	if [ -n "${!var:-}" ]; then
		val=${!var}
	elif [ -n "${!file_var:-}" ]; then
		val=$(<"${!file_var}")
	fi
	export "$var"="$val"
	unset "$file_var"
}

# want_help ARGS: postgres only prints and exits, so nothing to initialise.
want_help() {
	local arg
	for arg; do
		case "$arg" in
		-'?' | --help | --describe-config | -V | --version) return 0 ;;
		esac
	done
	return 1
}

if [ "${1:0:1}" = '-' ]; then
	set -- postgres "$@"
fi

if [ "$1" = postgres ] && ! want_help "$@" && [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" /var/run/postgresql
	chmod 00700 "$PGDATA"
	find "$PGDATA" \! -user postgres -exec chown postgres:postgres '{}' +
	chown postgres:postgres /var/run/postgresql
	chmod 2777 /var/run/postgresql
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$BASH_SOURCE" "$@"
fi

if [ "$1" = postgres ] && ! want_help "$@" && [ ! -s "$PGDATA/PG_VERSION" ]; then
	file_env POSTGRES_PASSWORD
	file_env POSTGRES_USER postgres
	file_env POSTGRES_DB "$POSTGRES_USER"
	file_env POSTGRES_INITDB_ARGS
	auth=${POSTGRES_HOST_AUTH_METHOD:-scram-sha-256}
	if [ -z "$POSTGRES_PASSWORD" ] && [ "$auth" != trust ]; then
		echo >&2 "error: database is uninitialized and superuser password is not specified."
		echo >&2 "  Set POSTGRES_PASSWORD (or POSTGRES_PASSWORD_FILE), or POSTGRES_HOST_AUTH_METHOD=trust."
		exit 1
	fi
	mkdir -p "$PGDATA"
	chmod 00700 "$PGDATA"
	echo "entrypoint: initdb in $PGDATA for user $POSTGRES_USER"
	# shellcheck disable=SC2086 # POSTGRES_INITDB_ARGS is a list of flags
	initdb --username="$POSTGRES_USER" --pwfile=<(printf '%s\n' "$POSTGRES_PASSWORD") \
		--auth-local=trust --auth-host="$auth" $POSTGRES_INITDB_ARGS
	printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

	# A server on the Unix socket only, so nothing reaches it before the
	# database and the init scripts are in place.
	pg_ctl -D "$PGDATA" -o "-c listen_addresses='' -p 5432" -w start
	psql=(psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --no-password --no-psqlrc)
	if [ "$POSTGRES_DB" != postgres ]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<<'CREATE DATABASE :"db" ;'
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) echo "entrypoint: running $f"; . "$f" ;;
		*.sql) echo "entrypoint: running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*.sql.gz) echo "entrypoint: running $f"; gunzip -c "$f" | "${psql[@]}" --dbname "$POSTGRES_DB" ;;
		*) if [ -e "$f" ]; then echo "entrypoint: ignoring $f"; fi ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo "entrypoint: init done, starting postgres"
fi

exec "$@"
