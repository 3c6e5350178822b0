import numpy as np, vkcore
r=np.random.default_rng(0)
for dt in ["float32","float16","int8"]:
    c=vkcore.KVCache(2, 80, 100, dtype=dt)
    k=r.standard_normal((2,30,80)).astype(np.float32); v=r.standard_normal((2,30,80)).astype(np.float32)
    c.append(k,v); c.append(k[:,:5]*3,v[:,:5])
    print(dt, len(c))
    kk,vv=c.numpy()
    q=r.standard_normal((8,1,80)).astype(np.float32)
    o=vkcore.attention(q,c,causal=True)
    ref=vkcore.reference.attention(q[None],kk,vv,causal=True)[0]
    print(abs(o-ref).max(), abs(kk[0,:,:30]-k).max())
    if dt=="int8":
        qk,sk,qv,sv=c.codes()
        rq,rs=vkcore.reference.kv_quantize(np.concatenate([k,k[:,:5]*3],1))
        print("codes eq", (qk[0]==rq).all(), (sk[0]==rs).all())
    with vkcore.sequence() as seq:
        c.append(k[:,:1],v[:,:1])
        o2=vkcore.attention(q,c)
        print("inside", len(c))
    print("after", len(c))
    kk,vv=c.numpy()
    print(abs(o2.numpy()-vkcore.reference.attention(q[None],kk,vv)[0]).max())
    seq.run(); print(len(c))
