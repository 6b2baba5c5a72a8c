// Keeps the library non-empty until bridge sources land.
namespace cedar::bridge { int placeholder_symbol() { return 0; } }
