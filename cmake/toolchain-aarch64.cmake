# cmake/toolchain-aarch64.cmake: cross-compiles xlserve for 64-bit ARM (aarch64) on a Debian
# amd64 host with Debian's cross compiler (gcc-aarch64-linux-gnu) and the arm64 multiarch
# libraries (libopenblas-dev:arm64, libjansson-dev:arm64 in /usr/lib/aarch64-linux-gnu).
# Built binaries run on the host under qemu-user: ctest starts every test through
# CMAKE_CROSSCOMPILING_EMULATOR (qemu-aarch64 with the arm64 loader and libraries as its root).
# Use: cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE=cmake/toolchain-aarch64.cmake \
#        -DXL_WITH_SERVER=OFF        (tools/test-arm64.sh does this, and installs the packages)
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(XL_CROSS_TRIPLE aarch64-linux-gnu)
set(CMAKE_C_COMPILER ${XL_CROSS_TRIPLE}-gcc)

# Headers and libraries of the target only: the cross libc in /usr/aarch64-linux-gnu, the arm64
# multiarch libraries in /usr/lib/aarch64-linux-gnu (searched first under the root "/" since
# CMAKE_LIBRARY_ARCHITECTURE names it). Programs (python, pkg-config) come from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${XL_CROSS_TRIPLE} /)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_LIBRARY_ARCHITECTURE ${XL_CROSS_TRIPLE})

# pkg-config answers from the arm64 .pc files only (as pkg-config's cross wrapper does).
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/${XL_CROSS_TRIPLE}/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# qemu-user runs the arm64 binaries for ctest (CMAKE_CROSSCOMPILING_EMULATOR prefixes every
# test command). The runtime is the host's arm64 multiarch root: libc6:arm64 (pulled in by the
# arm64 libraries) puts the loader at /lib/ld-linux-aarch64.so.1 and libc beside OpenBLAS, so
# "-L /" (no separate prefix) gives one consistent loader + libc + libraries. The cross libc in
# /usr/aarch64-linux-gnu is only linked against; its loader is not used at run time.
find_program(XL_QEMU_AARCH64 NAMES qemu-aarch64-static qemu-aarch64 REQUIRED)
set(CMAKE_CROSSCOMPILING_EMULATOR ${XL_QEMU_AARCH64} -L /)
