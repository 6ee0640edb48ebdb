# cmake/XlInstall.cmake: where `cmake --install` puts xlserve (included by the top-level
# CMakeLists.txt before server/). With the default prefix /usr/local:
#   /usr/local/bin/xlserve                                 the binary (server/CMakeLists.txt)
#   /usr/local/share/xlserve/models/<name>/                the bundled model(s), from models/
#   /etc/xlserve/xlserve.conf                              the config (kept if it exists)
#   /usr/local/lib/systemd/system/xlserve.service          the unit, paths rewritten for PREFIX
#   /usr/local/share/xlserve/nginx/xlserve.conf            the reverse-proxy config (to copy)
#   /usr/local/share/xlserve/nginx/xlserve-replicas.conf   the same for replicas sharing Redis
#   /usr/local/share/doc/xlserve/README.md
# The config goes to /etc/xlserve for the prefixes /usr/local and /usr (GNUInstallDirs would say
# /usr/local/etc), else to PREFIX/etc/xlserve; -DXL_INSTALL_CONFDIR=DIR overrides. Paths written
# into the unit come from the configure-time prefix: stage with DESTDIR, or configure with
# -DCMAKE_INSTALL_PREFIX (not `cmake --install --prefix`), for the unit to point at the binary.
#
# The default model of an installed binary: xlserve looks for ../share/xlserve beside its own
# executable (server/base/default_model.h) and then uses XL_INSTALLED_MODEL_REL below, relative to
# the binary, so a DESTDIR or relocated tree works; a binary elsewhere (the build tree) uses
# XL_DEFAULT_MODEL_DIR (the source tree's models/austen-byte).
include(GNUInstallDirs)

get_filename_component(XL_DEFAULT_MODEL_NAME "${XL_DEFAULT_MODEL_DIR}" NAME)
set(XL_INSTALL_MODELDIR "${CMAKE_INSTALL_DATADIR}/xlserve/models")
file(RELATIVE_PATH XL_INSTALLED_MODEL_REL "${CMAKE_INSTALL_FULL_BINDIR}"
     "${CMAKE_INSTALL_FULL_DATADIR}/xlserve/models/${XL_DEFAULT_MODEL_NAME}")

if(NOT DEFINED XL_INSTALL_CONFDIR)
  if(CMAKE_INSTALL_PREFIX MATCHES "^/usr(/local)?/*$")
    set(XL_INSTALL_CONFDIR "/etc/xlserve")
  else()
    set(XL_INSTALL_CONFDIR "${CMAKE_INSTALL_SYSCONFDIR}/xlserve")
  endif()
endif()
if(IS_ABSOLUTE "${XL_INSTALL_CONFDIR}")
  set(XL_CONF_FULL "${XL_INSTALL_CONFDIR}/xlserve.conf")
else()
  set(XL_CONF_FULL "${CMAKE_INSTALL_PREFIX}/${XL_INSTALL_CONFDIR}/xlserve.conf")
endif()
set(XL_INSTALL_UNITDIR "lib/systemd/system" CACHE STRING
    "Where the systemd unit goes, under the prefix (systemd reads /usr/local/lib/systemd/system)")

# the unit, with the binary's, the config's and the documentation's paths for this prefix
file(READ "${CMAKE_SOURCE_DIR}/systemd/xlserve.service" XL_UNIT)
string(REPLACE "/usr/local/bin/xlserve" "${CMAKE_INSTALL_FULL_BINDIR}/xlserve" XL_UNIT "${XL_UNIT}")
string(REPLACE "/etc/xlserve/xlserve.conf" "${XL_CONF_FULL}" XL_UNIT "${XL_UNIT}")
string(REPLACE "file:///usr/local/share/doc/xlserve" "file://${CMAKE_INSTALL_FULL_DOCDIR}"
       XL_UNIT "${XL_UNIT}")
file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/systemd/xlserve.service" CONTENT "${XL_UNIT}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             "${CMAKE_SOURCE_DIR}/systemd/xlserve.service")

install(FILES "${CMAKE_BINARY_DIR}/systemd/xlserve.service" DESTINATION "${XL_INSTALL_UNITDIR}")
install(DIRECTORY "${CMAKE_SOURCE_DIR}/models/" DESTINATION "${XL_INSTALL_MODELDIR}" OPTIONAL
        PATTERN ".*" EXCLUDE)
install(FILES "${CMAKE_SOURCE_DIR}/config/nginx/xlserve.conf"
              "${CMAKE_SOURCE_DIR}/config/nginx/xlserve-replicas.conf"
        DESTINATION "${CMAKE_INSTALL_DATADIR}/xlserve/nginx")
install(FILES "${CMAKE_SOURCE_DIR}/README.md" DESTINATION "${CMAKE_INSTALL_DOCDIR}")
# the config file: an existing one (edited by the admin) is kept
install(CODE "
  set(_dir \"${XL_INSTALL_CONFDIR}\")
  if(NOT IS_ABSOLUTE \"\${_dir}\")
    set(_dir \"\${CMAKE_INSTALL_PREFIX}/\${_dir}\")
  endif()
  if(EXISTS \"\$ENV{DESTDIR}\${_dir}/xlserve.conf\")
    message(STATUS \"Keeping: \$ENV{DESTDIR}\${_dir}/xlserve.conf\")
  else()
    file(INSTALL DESTINATION \"\${_dir}\" TYPE FILE FILES \"${CMAKE_SOURCE_DIR}/config/xlserve.conf\")
  endif()
")
