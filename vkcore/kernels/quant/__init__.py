"""RTN quantization: the stored layouts, QuantizedTensor, quantize, dequantize and the
error report against RTN's bounds (docs/quantization.md)."""
