#!/usr/bin/env bash
# ProcMesh::from_env under meshrun with mutual TLS: the spmd_procs checks
# (collective spawns, direct connections, a singleton, a store spawned on
# the mesh) with the job's certificates, made here by make_certs.sh.
#   spmd_tls.sh MAKE_CERTS MESHRUN SPMD_PROCS
set -eu
make_certs=$1 meshrun=$2 program=$3
dir=$(mktemp -d /tmp/meshstore-spmd-tls-XXXXXX)
trap 'rm -rf "$dir"' EXIT
"$make_certs" "$dir" node > /dev/null
"$meshrun" -n 3 --tls-cert "$dir/node.pem" --tls-key "$dir/node.key" --tls-ca "$dir/ca.pem" \
  -- "$program" "{procs: 3}"
