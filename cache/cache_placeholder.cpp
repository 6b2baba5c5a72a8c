// Keeps the library non-empty until cache sources land.
namespace cedar::cache { int placeholder_symbol() { return 0; } }
