# kvtier_embed_file(TARGET FILE NAMESPACE FUNCTION): compiles FILE (a text asset: a web page,
# a price table) into TARGET as `std::string_view NAMESPACE::FUNCTION()`. The source is
# generated at build time, so editing the asset rebuilds without reconfiguring.
function(kvtier_embed_file target file namespace function)
  get_filename_component(input "${file}" ABSOLUTE)
  get_filename_component(name "${file}" NAME)
  set(output "${CMAKE_CURRENT_BINARY_DIR}/embedded/${function}.cc")
  add_custom_command(
    OUTPUT "${output}"
    COMMAND ${CMAKE_COMMAND} -DINPUT=${input} -DOUTPUT=${output} -DNAMESPACE=${namespace}
            -DFUNCTION=${function} -P "${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake"
    DEPENDS "${input}" "${PROJECT_SOURCE_DIR}/cmake/embed_file.cmake"
    COMMENT "Embedding ${name}"
    VERBATIM)
  target_sources(${target} PRIVATE "${output}")
endfunction()
