#!/usr/bin/env bash
# Makes a relocatable, self-contained copy of Peregrine binaries under PREFIX, for the
# agent image: the chart's init container copies PREFIX into every training pod, where
# the training image may have none of gRPC, protobuf or Abseil (and another glibc).
#
#   PREFIX/libexec/<name>   the ELF executable as built
#   PREFIX/bin/<name>       a POSIX sh launcher (no other tool needed from the image):
#                           runs libexec/<name> through the bundled dynamic loader with
#                           --library-path PREFIX/lib, wherever PREFIX is mounted
#   PREFIX/lib/             every shared library the executables need (ldd), the loader,
#                           and each shared library given on the command line as is
#                           (libperegrine_nccl.so: preloaded into training processes, so
#                           it links only libc and must use the image's own)
#   PREFIX/lib/<dir>/       for a shared library given on the command line whose DT_RPATH
#                           or DT_RUNPATH is $ORIGIN/<dir> (libperegrine_client.so:
#                           $ORIGIN/client-deps): the libraries it needs (ldd) other than
#                           glibc's, libstdc++ and libgcc_s. It runs in the training
#                           process, which uses the image's glibc and C++ runtime: a
#                           process that already loaded a libstdc++.so.6 (torch's) reuses
#                           it whatever our search path says, and a bundled one loaded
#                           first could be older than what the image's own libraries need.
#                           Only the image's libstdc++ is then safe to use (the docs state
#                           the GLIBCXX and GLIBC versions it needs).
#
# The library search path is passed to the loader, not set in the environment, so the
# processes the agent starts (training) see the image's libraries only.
# NCCL (libnccl.so.2) is never bundled: the diagnostics tools must use the training image's
# NCCL, which the launcher finds through the image's LD_LIBRARY_PATH (searched after the
# bundle's lib/) or the loader's default paths.
#
# Usage: docker/bundle-runtime.sh PREFIX FILE...   (executables and .so files)
# Fails (exit 1, naming it) on a file that is missing, a library ldd cannot resolve, or a
# search path of a given library that is not one $ORIGIN/<dir>.
set -euo pipefail

if (($# < 2)); then
  echo "usage: $0 PREFIX FILE..." >&2
  exit 2
fi
prefix="$1"
shift
mkdir -p "${prefix}/bin" "${prefix}/libexec" "${prefix}/lib"

copy_deps() {
  local elf="$1" line lib loader
  if ! out="$(ldd "${elf}" 2>&1)"; then
    echo "bundle-runtime: ldd ${elf} failed: ${out}" >&2
    exit 1
  fi
  while IFS= read -r line; do
    line="${line#"${line%%[![:space:]]*}"}"
    case "${line}" in
      *"not found"*)
        echo "bundle-runtime: ${elf}: ${line}" >&2
        exit 1 ;;
      libnccl.so*)  # NCCL is the training image's own (never the build's stand-in)
        ;;
      *" => "/*)
        lib="${line#* => }"
        lib="${lib%% (*}"
        cp -L "${lib}" "${prefix}/lib/" ;;
      /*)  # the loader: "/lib64/ld-linux-x86-64.so.2 (0x...)"
        loader="${line%% (*}"
        cp -L "${loader}" "${prefix}/lib/"
        echo "${loader##*/}" > "${prefix}/lib/.loader" ;;
    esac
  done <<< "${out}"
}

# The directory under lib/ a given library's $ORIGIN/<dir> search path names ("" when it
# has none).
origin_dir() {
  local so="$1" paths
  paths="$(readelf -d "${so}" | sed -n 's/.*(\(RPATH\|RUNPATH\)).*\[\(.*\)\]/\2/p')"
  [ -z "${paths}" ] && return 0
  case "${paths}" in
    '$ORIGIN/'*[!/]*)
      case "${paths#\$ORIGIN/}" in
        *:*|*/*|.*) ;;
        *) echo "${paths#\$ORIGIN/}"; return 0 ;;
      esac ;;
  esac
  echo "bundle-runtime: ${so}: search path '${paths}' is not one \$ORIGIN/<dir>" >&2
  exit 1
}

# Copies into DIR the libraries SO needs (ldd) other than glibc's, libstdc++, libgcc_s
# and NCCL: what the training image is not expected to have.
copy_foreign_deps() {
  local so="$1" dir="$2" line lib out
  if ! out="$(ldd "${so}" 2>&1)"; then
    echo "bundle-runtime: ldd ${so} failed: ${out}" >&2
    exit 1
  fi
  mkdir -p "${dir}"
  while IFS= read -r line; do
    line="${line#"${line%%[![:space:]]*}"}"
    case "${line}" in
      *"not found"*)
        echo "bundle-runtime: ${so}: ${line}" >&2
        exit 1 ;;
      libc.so.*|libm.so.*|libmvec.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libresolv.so.*|\
      libutil.so.*|libanl.so.*|libnsl.so.*|ld-linux*|libstdc++.so.*|libgcc_s.so.*|libnccl.so*)
        ;;
      *" => "/*)
        lib="${line#* => }"
        lib="${lib%% (*}"
        cp -L "${lib}" "${dir}/" ;;
    esac
  done <<< "${out}"
}

for f in "$@"; do
  if [ ! -f "${f}" ]; then
    echo "bundle-runtime: ${f}: no such file (build it first)" >&2
    exit 1
  fi
  name="$(basename "${f}")"
  case "${name}" in
    *.so|*.so.*)
      cp -L "${f}" "${prefix}/lib/${name}"
      deps="$(origin_dir "${f}")"
      if [ -n "${deps}" ]; then
        copy_foreign_deps "${f}" "${prefix}/lib/${deps}"
      fi ;;
    *)
      cp -L "${f}" "${prefix}/libexec/${name}"
      copy_deps "${f}"
      loader="$(cat "${prefix}/lib/.loader")"
      cat > "${prefix}/bin/${name}" <<LAUNCHER
#!/bin/sh
# Generated by docker/bundle-runtime.sh: ${name} with its bundled libraries.
case "\$0" in */*) here="\${0%/*}/.." ;; *) here=.. ;; esac
exec "\$here/lib/${loader}" --library-path "\$here/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" --argv0 "\$0" "\$here/libexec/${name}" "\$@"
LAUNCHER
      chmod 0755 "${prefix}/bin/${name}" ;;
  esac
done
rm -f "${prefix}/lib/.loader"
