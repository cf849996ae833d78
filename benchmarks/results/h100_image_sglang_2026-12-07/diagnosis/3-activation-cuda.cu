#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/c_env_api.h>
#include <tvm/ffi/function.h>

#include "/root/tree2/opt/venv/lib/python3.11/site-packages/sglang/jit_kernel/csrc/elementwise/activation.cuh"
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_activation, (ActivationKernel<bf16_t, true>::run_activation));
TVM_FFI_DLL_EXPORT_TYPED_FUNC(run_activation_filtered, (ActivationKernel<bf16_t, true>::run_activation_filtered));
