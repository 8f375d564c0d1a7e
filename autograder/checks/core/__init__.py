"""The mechanisms of grading, the same for every notebook: the harness and how it compares, the
declared contracts and input spaces, the device emulation, the watch of what executes, the
shortcut rule, mutants. One package per notebook (nbNN/) holds its checks, contract and helpers."""
