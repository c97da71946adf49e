# Sourced by the tests that run over libfabric's tcp;ofi_rxm: exits 77, saying why, where
# it is missing; else exports FI_PROVIDER for the ranks.
# fi_info (libfabric-bin) where it is installed; else libfabric itself, which has tcp and rxm built in.
if command -v fi_info >/dev/null; then
  fi_info -p 'tcp;ofi_rxm' >/dev/null 2>&1 || { echo "skipped: libfabric's tcp;ofi_rxm is missing (fi_info -p 'tcp;ofi_rxm')"; exit 77; }
# grep reads all of it: with -q, ldconfig may die of SIGPIPE, which pipefail takes for absence.
elif ! ldconfig -p | grep 'libfabric\.so\.1 ' >/dev/null; then
  echo "skipped: libfabric (libfabric.so.1) is not installed"; exit 77
fi
export FI_PROVIDER='tcp;ofi_rxm'
