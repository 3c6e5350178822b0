// Workgroup reductions that are correct for any workgroup size.
//
// A workgroup need not be a multiple of the subgroup size, and the host cannot predict
// the subgroup size a driver picks. gl_NumSubgroups and gl_SubgroupID are not trusted
// (lavapipe reports gl_NumSubgroups == 1 for a workgroup of 12 made of subgroups of 8
// and 4), so the shared-memory path indexes slots by gl_LocalInvocationID only.
//
// SUBGROUP 1 (the default): a workgroup of one subgroup reduces with subgroup arithmetic.
// SUBGROUP 0: shared memory only, for devices without subgroup arithmetic in compute
// shaders (the host chooses: vkcore.kernels.variants); the SPIR-V then has no subgroup
// capability at all. Call sites guard their subgroup branch with `#if SUBGROUP`.
#ifndef SUBGROUP
#define SUBGROUP 1
#endif
#if SUBGROUP
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

// True when this invocation's subgroup is the whole workgroup: then subgroup operations
// alone reduce the workgroup, with no shared memory and no barrier. Uniform: if one
// subgroup holds every invocation there is no other subgroup.
bool one_subgroup() { return subgroupAdd(1u) == gl_WorkGroupSize.x; }
#endif

// First stride of a tree over gl_WorkGroupSize.x slots: the largest power of two below it.
uint tree_top() {
    uint n = gl_WorkGroupSize.x;
    return n > 1u ? 1u << uint(findMSB(n - 1u)) : 0u;
}

// Folds shared slots [0, gl_WorkGroupSize.x) into slot 0: COMBINE(dst, src) takes two slot
// indices. Every invocation must reach it (it has barriers), after writing its slot and
// passing a barrier; slot 0 is valid in every invocation afterwards.
#define TREE_REDUCE(COMBINE)                                                   \
    for (uint tree_s = tree_top(); tree_s > 0u; tree_s >>= 1u) {               \
        uint tree_a = gl_LocalInvocationID.x;                                  \
        if (tree_a < tree_s && tree_a + tree_s < gl_WorkGroupSize.x) {         \
            COMBINE(tree_a, tree_a + tree_s);                                  \
        }                                                                      \
        barrier();                                                             \
    }
