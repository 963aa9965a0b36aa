# Sourced by .ci/schemathesis and .ci/generated_client: starts the real binary
# on one backend ($1: sqlite or postgres) with an API key, a verified domain
# (example.com) and a mailbox (hello@example.com) prepared. Sets $work (a temp
# directory removed on exit), $base (the server's URL) and $key; stops the
# server on exit. PIGEONHOLE_SERVE_LOG names a file to keep the server's log in.
backend="${1:?sqlite or postgres}"
bin="${PIGEONHOLE_BIN:-target/debug/pigeonhole}"
work="$(mktemp -d)"
port="$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
case "$backend" in
    sqlite) db="sqlite://$work/st.db" ;;
    postgres)
        name="ph_test_st_$$"
        psql -q -h 127.0.0.1 -U postgres -d postgres -c "DROP DATABASE IF EXISTS $name" -c "CREATE DATABASE $name"
        db="postgres://postgres@127.0.0.1:5432/$name" ;;
    *) echo "unknown backend $backend" >&2; exit 2 ;;
esac
export PIGEONHOLE_DATABASE_URL="$db" PIGEONHOLE_LISTEN="127.0.0.1:$port" PIGEONHOLE_SMTP_LISTEN="" \
    PIGEONHOLE_ENV=development PIGEONHOLE_RATE_LIMIT=1000000 PIGEONHOLE_OPEN_TRACKING=false \
    RUST_LOG="${RUST_LOG:-error}"
"$bin" serve >"${PIGEONHOLE_SERVE_LOG:-$work/serve.log}" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; wait $server 2>/dev/null || true; rm -rf "$work"' EXIT
base="http://127.0.0.1:$port"
for _ in $(seq 1 100); do curl -fs "$base/healthz" >/dev/null && break; sleep 0.1; done
key="$("$bin" keys create --name "$(basename "$0")" | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["key"])')"
auth="Authorization: Bearer $key"
curl -fs -H "$auth" -H 'content-type: application/json' -d '{"name":"example.com"}' "$base/api/v1/domains" >/dev/null
curl -fs -H "$auth" -X POST "$base/api/v1/domains/example.com/verify" >/dev/null
curl -fs -H "$auth" -H 'content-type: application/json' -d '{"address":"hello@example.com"}' "$base/api/v1/mailboxes" >/dev/null
