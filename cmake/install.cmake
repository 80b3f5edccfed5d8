# Placeholder: install rules and the exported CMake package are being written.
