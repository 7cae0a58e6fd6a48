/* An NCCL stand-in for CPU-run tests (see cuda_runtime_api.h here): one
 * rank per communicator, so every collective is a copy queued on its
 * stream like any other stream work (run lazily, in stream order).  Inside
 * ncclGroupStart/End the calls are held and queued at the outermost
 * ncclGroupEnd, as NCCL launches a group. */
#ifndef ZERO_TEST_FAKE_NCCL_H
#define ZERO_TEST_FAKE_NCCL_H
#include <stddef.h>
#include "cuda_runtime_api.h"

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclInvalidArgument = 4, ncclInProgress = 7 } ncclResult_t;
typedef enum {
    ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
    ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3 } ncclRedOp_t;
typedef struct fake_nccl_comm *ncclComm_t;
typedef struct ncclConfig_v { int unused; } ncclConfig_t;
typedef struct { char internal[128]; } ncclUniqueId;
#define NCCL_SPLIT_NOCOLOR -1

const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t c);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *c, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommSplit(ncclComm_t c, int color, int key, ncclComm_t *out, ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t c);
ncclResult_t ncclCommAbort(ncclComm_t c);
ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r);
ncclResult_t ncclCommUserRank(ncclComm_t c, int *rank);
ncclResult_t ncclCommCount(ncclComm_t c, int *count);
ncclResult_t ncclCommCuDevice(ncclComm_t c, int *dev);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t t, int root, ncclComm_t c,
                           cudaStream_t s);
ncclResult_t ncclReduce(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                        ncclComm_t c, cudaStream_t s);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t count, ncclDataType_t t, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t c, cudaStream_t s);
/* One rank: a send is held until the matching receive, which copies it. */
ncclResult_t ncclSend(const void *send, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);
ncclResult_t ncclRecv(void *recv, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s);

/* Test helper: a one-rank communicator on device 0. */
ncclComm_t fake_nccl_comm_new(void);
#endif
