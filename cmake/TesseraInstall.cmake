# Installs the library, headers (core/include and core/kernels as tessera/kernels) and a
# CMake package so that find_package(Tessera) gives Tessera::tessera.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS tessera tessera_nn EXPORT TesseraTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/core/kernels/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tessera/kernels)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/nn/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# ONNX import/export (<tessera/onnx.h>, Tessera::onnx) when the build has it.
set(TESSERA_ONNX_INSTALLED OFF)
if(TARGET tessera_onnx)
  install(TARGETS tessera_onnx EXPORT TesseraTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/onnx/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  set(TESSERA_ONNX_INSTALLED ON)
endif()
if(TARGET tessera_cli)
  install(TARGETS tessera_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT TesseraTargets NAMESPACE Tessera:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/TesseraConfig.cmake.in
  ${PROJECT_BINARY_DIR}/TesseraConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/TesseraConfig.cmake ${PROJECT_BINARY_DIR}/TesseraConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Tessera)
# pkg-config: `pkg-config --cflags --libs tessera` for builds without CMake (the core and nn
# libraries; in a static build, their dependencies too).
set(TESSERA_PC_LIBS "-ltessera_nn -ltessera")
if(NOT TESSERA_MODULES)
  string(APPEND TESSERA_PC_LIBS " -ltbb -lz -lpthread -ldl")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/tessera.pc.in ${PROJECT_BINARY_DIR}/tessera.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tessera.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
