import numpy as np, vkcore, time, sys
from vkcore.kernels.attention import plan
plan.MAX_TILE=int(sys.argv[1])
r=np.random.default_rng(0)
def best(f,n=5):
    t=[]
    for _ in range(n):
        a=time.perf_counter(); f(); t.append(time.perf_counter()-a)
    return min(t)
for d in [16,128]:
    c=vkcore.KVCache(8,d,4096,dtype="float16")
    k=r.standard_normal((8,4096,d)).astype(np.float32)
    c.append(k,k)
    qt=vkcore.asarray(r.standard_normal((32,1,d)).astype(np.float32))
    vkcore.attention(qt,c)
    print(sys.argv[1], d, best(lambda: vkcore.attention(qt,c).numpy()))
