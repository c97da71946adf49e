#!/bin/sh
# What net/ofi/libfabric.cpp loads, read off the libfabric a link would use (LIB, its
# libfabric.so): the soname, and for each function optcast calls the symbol version
# such a link would bind (the default one, marked @@ by nm). One "NAME VALUE" per line,
# for meson's configure_file at configure time.
set -eu
lib=$1
soname=$(readelf -d "$lib" | sed -n 's/.*(SONAME).*\[\(.*\)\].*/\1/p')
[ -n "$soname" ] || { echo "libfabric_symbols.sh: no SONAME in $lib" >&2; exit 1; }
echo "OPTCAST_FI_SONAME $soname"
for f in fi_getinfo fi_freeinfo fi_dupinfo fi_fabric fi_strerror; do
  v=$(nm -D --defined-only "$lib" | sed -n "s/.* $f@@\(.*\)$/\1/p")
  [ -n "$v" ] || { echo "libfabric_symbols.sh: $lib has no default version of $f" >&2; exit 1; }
  echo "OPTCAST_$(echo "$f" | tr a-z A-Z)_VERSION $v"
done
