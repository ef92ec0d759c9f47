#!/bin/sh
# bpf/build.sh DIR [WORK]: builds bloatlab_dctcp.bpf.c into DIR/bloatlab_dctcp.bpf.o against
# this kernel's BTF (its header, vmlinux.h, goes into WORK, by default DIR): the one way to build
# it, for `make build` (DIR = target/bpf) and for a wheel (setup.py: the package's _bin). Where the kernel has no BTF, or clang, bpftool or libbpf-dev are missing, it says so and
# builds nothing; it never fails the build that calls it. The object is rebuilt only when the
# source or the kernel's BTF changed.
set -u
dir=${1:?usage: bpf/build.sh DIR [WORK]}
work=${2:-$dir}
here=$(dirname "$0")
src=$here/bloatlab_dctcp.bpf.c
obj=$dir/bloatlab_dctcp.bpf.o
btf=/sys/kernel/btf/vmlinux
if [ ! -r "$btf" ]; then
    echo "bpf: skipped: this kernel has no BTF ($btf); cc = \"dctcp\" needs its tcp_dctcp"; exit 0
fi
bpftool=$(command -v bpftool || { test -x /usr/sbin/bpftool && echo /usr/sbin/bpftool; } \
    || { test -x /sbin/bpftool && echo /sbin/bpftool; } || true)
if ! command -v clang >/dev/null 2>&1 || [ -z "$bpftool" ] || [ ! -e /usr/include/bpf/bpf_helpers.h ]; then
    echo "bpf: skipped: needs clang, bpftool and libbpf-dev (make packages installs them as root)"; exit 0
fi
mkdir -p "$dir" "$work"
# vmlinux.h is replaced only when the BTF changed, so that its date says when to rebuild.
if ! "$bpftool" btf dump file "$btf" format c > "$work/vmlinux.h.new"; then
    rm -f "$work/vmlinux.h.new"; echo "bpf: skipped: bpftool could not read $btf" >&2; exit 0
fi
if cmp -s "$work/vmlinux.h.new" "$work/vmlinux.h"; then rm "$work/vmlinux.h.new"; else mv "$work/vmlinux.h.new" "$work/vmlinux.h"; fi
if [ "$obj" -nt "$work/vmlinux.h" ] && [ "$obj" -nt "$src" ]; then exit 0; fi
arch=$(uname -m | sed -e 's/x86_64/x86/' -e 's/aarch64/arm64/' -e 's/ppc64le/powerpc/' -e 's/s390x/s390/')
echo "bpf: clang $src -> $obj"
if clang -O2 -g -Wall -Werror -target bpf -D__TARGET_ARCH_$arch -I "$work" -c "$src" -o "$obj.new"; then
    mv "$obj.new" "$obj"
else
    rm -f "$obj.new" "$obj"; echo "bpf: the BPF DCTCP did not compile (above); cc = \"dctcp\" is unavailable" >&2
fi
