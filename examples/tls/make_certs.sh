#!/usr/bin/env bash
# make_certs.sh DIR [NAME...]: a certificate authority of a job's own and,
# for each NAME (default: node), a certificate it signs: DIR/ca.pem and
# DIR/NAME.pem + DIR/NAME.key, for meshstore's mutual TLS
# (docs/security.md). Keys are P-256, readable by this user only.
#
#   examples/tls/make_certs.sh /etc/meshstore/job1 server client
#   meshstore serve --tls-cert /etc/meshstore/job1/server.pem \
#       --tls-key /etc/meshstore/job1/server.key --tls-ca /etc/meshstore/job1/ca.pem
#
# CAF 0.17 checks no host name: every certificate this CA signs is accepted
# from any address, so make one CA per job (or trust domain) and keep ca.key
# away from the hosts.
set -euo pipefail
if [[ $# -lt 1 ]]; then
  echo "usage: $0 DIR [NAME...]" >&2
  exit 2
fi
dir=$1
shift
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(node)
mkdir -p "$dir"
umask 077
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
if [[ ! -f $dir/ca.pem ]]; then
  key "$dir/ca.key"
  openssl req -x509 -new -key "$dir/ca.key" -out "$dir/ca.pem" -days 3650 \
    -subj "/CN=meshstore CA $(basename "$dir")" 2>/dev/null
fi
for n in "${names[@]}"; do
  key "$dir/$n.key"
  # NAME (and loopback) as subjectAltNames too: HTTPS clients such as
  # Prometheus check the server's name there (docs/operations.md).
  openssl req -new -key "$dir/$n.key" -subj "/CN=$n" \
    -addext "subjectAltName=DNS:$n,IP:127.0.0.1" -out "$dir/$n.csr" 2>/dev/null
  openssl x509 -req -in "$dir/$n.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -copy_extensions copy -days 825 -out "$dir/$n.pem" 2>/dev/null
  rm -f "$dir/$n.csr"
done
chmod 644 "$dir/ca.pem" "$dir"/*.pem
echo "make_certs: in $dir: ca.pem, and a .pem and .key for: ${names[*]}"
