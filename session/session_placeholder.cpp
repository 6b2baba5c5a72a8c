// Keeps the library non-empty until session sources land.
namespace cedar::session { int placeholder_symbol() { return 0; } }
