"""The capability matrix (a package, so that its Ray node is package-scoped: torn down when the matrix ends)."""
