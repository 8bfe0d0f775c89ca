# The C++ API reference (docs/reference/Doxyfile.in): Doxygen (Debian's
# doxygen, installed by scripts/setup.sh) over the installed headers.
# `api_docs` builds it into build/docs/api/html; ctest style.api_docs builds
# it and fails on any warning, an undocumented public symbol among them.
# Include after MeshstoreInstall, which lists the headers.
find_program(MESHSTORE_DOXYGEN doxygen)
if(MESHSTORE_DOXYGEN)
  list(JOIN MESHSTORE_PUBLIC_HEADERS " " MESHSTORE_DOXYGEN_INPUT)
  configure_file(${PROJECT_SOURCE_DIR}/docs/reference/Doxyfile.in
                 ${PROJECT_BINARY_DIR}/docs/Doxyfile @ONLY)
  add_custom_target(api_docs
    COMMAND ${MESHSTORE_DOXYGEN} ${PROJECT_BINARY_DIR}/docs/Doxyfile
    WORKING_DIRECTORY ${PROJECT_BINARY_DIR}/docs
    COMMENT "Doxygen: the C++ API reference in build/docs/api/html"
    VERBATIM)
  if(MESHSTORE_BUILD_TESTS)
    add_test(NAME style.api_docs
      COMMAND ${MESHSTORE_DOXYGEN} ${PROJECT_BINARY_DIR}/docs/Doxyfile
      WORKING_DIRECTORY ${PROJECT_BINARY_DIR}/docs)
    set_tests_properties(style.api_docs PROPERTIES LABELS style TIMEOUT 300)
  endif()
elseif(MESHSTORE_BUILD_TESTS)
  add_test(NAME style.api_docs COMMAND ${CMAKE_COMMAND} -E echo
           "style.api_docs: skipped: doxygen is not installed (scripts/setup.sh installs it)")
  set_tests_properties(style.api_docs PROPERTIES LABELS style SKIP_REGULAR_EXPRESSION "skipped")
endif()
