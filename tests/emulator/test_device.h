// A fresh emulated device for each case of the emulator's own tests (wrong_kernels.cu,
// racing_kernels.cu): arrays on it, read back, and the error it reports.
#pragma once

#include <cuda_runtime.h>

#include <string>
#include <vector>

struct Device {
  Device() { cudaDeviceReset(); }
  ~Device() { cudaDeviceReset(); }
  double* array(std::vector<double> values) {
    void* p = nullptr;
    cudaMalloc(&p, values.size() * sizeof(double));
    cudaMemcpy(p, values.data(), values.size() * sizeof(double), cudaMemcpyHostToDevice);
    return static_cast<double*>(p);
  }
  std::vector<double> read(const double* p, std::size_t n) {
    std::vector<double> out(n);
    cudaMemcpy(out.data(), p, n * sizeof(double), cudaMemcpyDeviceToHost);
    return out;
  }
  // The error the device reports after synchronizing, "" for none.
  static std::string error() {
    cudaError_t status = cudaDeviceSynchronize();
    if (status == cudaSuccess) status = cudaGetLastError();
    return status == cudaSuccess ? "" : cudaGetErrorString(status);
  }
};
