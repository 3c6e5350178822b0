import numpy as np, vkcore, time, sys
from vkcore.kernels.attention import plan
wg=int(sys.argv[1]); mt=int(sys.argv[2])
plan.workgroup_size=lambda info: wg
plan.MAX_TILE=mt; plan.MAX_ACC_SLOTS=256
r=np.random.default_rng(0)
def best(f,n=3):
    t=[]
    for _ in range(n):
        a=time.perf_counter(); f(); t.append(time.perf_counter()-a)
    return min(t)
c=vkcore.KVCache(8,128,4096,dtype="float16")
k=r.standard_normal((8,4096,128)).astype(np.float32); v=r.standard_normal((8,4096,128)).astype(np.float32)
c.append(k,v)
qt=vkcore.asarray(r.standard_normal((32,1,128)).astype(np.float32))
vkcore.attention(qt,c)
print(wg, mt, "decode vk", best(lambda: vkcore.attention(qt,c)))
q=r.standard_normal((8,1024,64)).astype(np.float32); k=r.standard_normal((8,1024,64)).astype(np.float32); v=r.standard_normal((8,1024,64)).astype(np.float32)
qt,kt,vt=[vkcore.asarray(x) for x in (q,k,v)]
vkcore.attention(qt,kt,vt,causal=True)
print(wg, mt, "prefill vk", best(lambda: vkcore.attention(qt,kt,vt,causal=True),2))
