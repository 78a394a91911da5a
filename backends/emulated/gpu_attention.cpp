// The shared GPU kernel source, compiled by the host compiler for the emulated backend.
#include "../gpu/attention.cu"
