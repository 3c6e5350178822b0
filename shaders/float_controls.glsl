// Float32 rounding for the kernels whose results are promised bit for bit.
//
// Vulkan leaves the rounding of OpFAdd/OpFSub/OpFMul and conversions implementation-defined
// (to nearest even or toward zero) unless the shader asks for a mode (SPV_KHR_float_controls).
// RTE 1 (chosen by the host where shaderRoundingModeRTEFloat32 is reported) requests
// round-to-nearest-even, numpy's rounding; RTE 0 runs in the device's default mode, where
// each float result is only within one rounding (vkcore.kernels.variants.exactness).
#ifndef RTE
#define RTE 0
#endif
#if RTE
#extension GL_EXT_spirv_intrinsics : require
// ExecutionMode RoundingModeRTE (4462) for 32-bit floats; capability RoundingModeRTE (4467).
spirv_execution_mode(extensions = ["SPV_KHR_float_controls"], capabilities = [4467], 4462, 32);
#endif
