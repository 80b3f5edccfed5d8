// Placeholder while the C ABI is written.
