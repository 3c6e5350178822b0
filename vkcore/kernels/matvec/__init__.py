"""Matrix-vector products: INT8 and 4-bit weights (weight-only and full-integer) and
float32 matrices (docs/quantization.md)."""
