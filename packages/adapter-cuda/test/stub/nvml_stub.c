/*
 * A stand-in for libnvidia-ml.so.1 with the NVML entry points @stormlog/adapter-cuda calls, for
 * tests and benchmarks on machines without an NVIDIA driver. Behaviour is driven by the stub_*
 * control functions below (called from the tests through koffi, in the same process):
 * memory values, process lists, a lost device, injected errors, a missing _v2 symbol (build with
 * -DSTUB_NO_MEMORY_V2) or a _v2 that answers NVML_ERROR_FUNCTION_NOT_FOUND, and call counters
 * that record whether each call ran on the process's main thread.
 * STORMLOG_NVML_STUB_DEVICES sets the initial device count (default 2).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_FUNCTION_NOT_FOUND 13
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_ARGUMENT_VERSION_MISMATCH 25
#define NVML_ERROR_UNKNOWN 999

#define MAX_DEVICES 8
#define MAX_PROCS 256
#define MAX_FAILS 32
#define MAX_COUNTERS 32

typedef struct {
  unsigned int pid;
  unsigned long long used;
} stub_proc;

typedef struct stub_device {
  unsigned int index;
  char name[96];
  char uuid[96];
  unsigned long long total, used, reserved;
  int lost;
  int not_available; /* bits: 1 total, 2 free, 4 used, 8 reserved -> NVML_VALUE_NOT_AVAILABLE */
  int nprocs;
  stub_proc procs[MAX_PROCS];
} stub_device;

typedef stub_device *nvmlDevice_t;

typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;

typedef struct {
  unsigned int version;
  unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | (2u << 24)))

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

typedef struct {
  char fn[64];
  int code;
  int times; /* < 0: forever */
} stub_fail_rule;

typedef struct {
  char fn[64];
  long calls;
  int last_on_main;
} stub_counter;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static stub_device devices[MAX_DEVICES];
static int device_count = 2;
static int init_count = 0;
static int v2_not_found = 0;
static unsigned int delay_us = 0;
static stub_fail_rule fails[MAX_FAILS];
static stub_counter counters[MAX_COUNTERS];

static void reset_locked(int count) {
  if (count < 0) count = 0;
  if (count > MAX_DEVICES) count = MAX_DEVICES;
  device_count = count;
  memset(devices, 0, sizeof devices);
  for (int i = 0; i < MAX_DEVICES; i++) {
    stub_device *d = &devices[i];
    d->index = (unsigned int)i;
    snprintf(d->name, sizeof d->name, "Stub GPU %d", i);
    snprintf(d->uuid, sizeof d->uuid, "GPU-5a0b0000-0000-4000-8000-00000000000%d", i);
    d->total = 16ULL << 30;
    d->reserved = 300ULL << 20;
    d->used = (1ULL << 30) + (unsigned long long)i * (1ULL << 20);
  }
  v2_not_found = 0;
  delay_us = 0;
  memset(fails, 0, sizeof fails);
  memset(counters, 0, sizeof counters);
}

__attribute__((constructor)) static void stub_load(void) {
  const char *env = getenv("STORMLOG_NVML_STUB_DEVICES");
  reset_locked(env ? atoi(env) : 2);
}

/* Counts the call, records the calling thread and returns an injected error, if any. */
static nvmlReturn_t enter(const char *fn) {
  pthread_mutex_lock(&lock);
  int on_main = (pid_t)syscall(SYS_gettid) == getpid();
  stub_counter *c = NULL;
  for (int i = 0; i < MAX_COUNTERS; i++) {
    if (counters[i].fn[0] == 0) {
      snprintf(counters[i].fn, sizeof counters[i].fn, "%s", fn);
      c = &counters[i];
      break;
    }
    if (strcmp(counters[i].fn, fn) == 0) {
      c = &counters[i];
      break;
    }
  }
  if (c) {
    c->calls++;
    c->last_on_main = on_main;
  }
  nvmlReturn_t ret = NVML_SUCCESS;
  for (int i = 0; i < MAX_FAILS; i++) {
    if (fails[i].fn[0] != 0 && fails[i].times != 0 && strcmp(fails[i].fn, fn) == 0) {
      ret = fails[i].code;
      if (fails[i].times > 0) fails[i].times--;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
  return ret;
}

static nvmlReturn_t check_device(nvmlDevice_t device) {
  if (!init_count) return NVML_ERROR_UNINITIALIZED;
  if (device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
  if (device->lost) return NVML_ERROR_GPU_IS_LOST;
  return NVML_SUCCESS;
}

static void copy_string(char *dst, unsigned int length, const char *src) {
  if (length == 0) return;
  snprintf(dst, length, "%s", src);
}

/* ---- control API ---- */

void stub_reset(int count) {
  pthread_mutex_lock(&lock);
  reset_locked(count);
  pthread_mutex_unlock(&lock);
}

int stub_set_memory(int dev, unsigned long long total, unsigned long long used, unsigned long long reserved) {
  if (dev < 0 || dev >= MAX_DEVICES) return -1;
  pthread_mutex_lock(&lock);
  devices[dev].total = total;
  devices[dev].used = used;
  devices[dev].reserved = reserved;
  pthread_mutex_unlock(&lock);
  return 0;
}

int stub_set_uuid(int dev, const char *uuid) {
  if (dev < 0 || dev >= MAX_DEVICES) return -1;
  pthread_mutex_lock(&lock);
  snprintf(devices[dev].uuid, sizeof devices[dev].uuid, "%s", uuid);
  pthread_mutex_unlock(&lock);
  return 0;
}

/* Makes memory fields read as NVML_VALUE_NOT_AVAILABLE: bits 1 total, 2 free, 4 used, 8 reserved. */
int stub_set_not_available(int dev, int mask) {
  if (dev < 0 || dev >= MAX_DEVICES) return -1;
  devices[dev].not_available = mask;
  return 0;
}

int stub_set_lost(int dev, int lost) {
  if (dev < 0 || dev >= MAX_DEVICES) return -1;
  devices[dev].lost = lost;
  return 0;
}

/* Appends a process to a device's compute process list; pid 0 clears the list. */
int stub_add_process(int dev, unsigned int pid, unsigned long long used) {
  if (dev < 0 || dev >= MAX_DEVICES) return -1;
  pthread_mutex_lock(&lock);
  stub_device *d = &devices[dev];
  if (pid == 0) {
    d->nprocs = 0;
  } else if (d->nprocs < MAX_PROCS) {
    d->procs[d->nprocs].pid = pid;
    d->procs[d->nprocs].used = used;
    d->nprocs++;
  }
  int n = d->nprocs;
  pthread_mutex_unlock(&lock);
  return n;
}

/* The next `times` calls of `fn` return `code` (times < 0: every call; code 0 removes the rule). */
void stub_fail(const char *fn, int code, int times) {
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_FAILS; i++) {
    if (fails[i].fn[0] == 0 || strcmp(fails[i].fn, fn) == 0) {
      snprintf(fails[i].fn, sizeof fails[i].fn, "%s", fn);
      fails[i].code = code;
      fails[i].times = code == 0 ? 0 : times;
      break;
    }
  }
  pthread_mutex_unlock(&lock);
}

void stub_set_v2_not_found(int on) { v2_not_found = on; }
void stub_set_delay_us(unsigned int us) { delay_us = us; }
int stub_init_count(void) { return init_count; }

long stub_calls(const char *fn) {
  long n = 0;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_COUNTERS; i++) {
    if (strcmp(counters[i].fn, fn) == 0) n = counters[i].calls;
  }
  pthread_mutex_unlock(&lock);
  return n;
}

/* 1 if the last call of fn ran on the main thread, 0 if on another thread, -1 if never called. */
int stub_last_on_main(const char *fn) {
  int r = -1;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < MAX_COUNTERS; i++) {
    if (strcmp(counters[i].fn, fn) == 0) r = counters[i].last_on_main;
  }
  pthread_mutex_unlock(&lock);
  return r;
}

/* ---- NVML ---- */

nvmlReturn_t nvmlInit_v2(void) {
  nvmlReturn_t r = enter("nvmlInit_v2");
  if (r) return r;
  init_count++;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
  nvmlReturn_t r = enter("nvmlShutdown");
  if (r) return r;
  if (!init_count) return NVML_ERROR_UNINITIALIZED;
  init_count--;
  return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
  switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    default: return "Unknown Error";
  }
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
  nvmlReturn_t r = enter("nvmlSystemGetDriverVersion");
  if (r) return r;
  copy_string(version, length, "999.99-stub");
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
  nvmlReturn_t r = enter("nvmlDeviceGetCount_v2");
  if (r) return r;
  if (!init_count) return NVML_ERROR_UNINITIALIZED;
  *count = (unsigned int)device_count;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
  nvmlReturn_t r = enter("nvmlDeviceGetHandleByIndex_v2");
  if (r) return r;
  if (!init_count) return NVML_ERROR_UNINITIALIZED;
  if (index >= (unsigned int)device_count) return NVML_ERROR_INVALID_ARGUMENT;
  *device = &devices[index];
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
  nvmlReturn_t r = enter("nvmlDeviceGetHandleByUUID");
  if (r) return r;
  if (!init_count) return NVML_ERROR_UNINITIALIZED;
  for (int i = 0; i < device_count; i++) {
    if (strcmp(devices[i].uuid, uuid) == 0) {
      *device = &devices[i];
      return NVML_SUCCESS;
    }
  }
  return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
  nvmlReturn_t r = enter("nvmlDeviceGetIndex");
  if (r) return r;
  if ((r = check_device(device))) return r;
  if (strncmp(device->uuid, "MIG-", 4) == 0) return NVML_ERROR_INVALID_ARGUMENT;
  *index = device->index;
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
  nvmlReturn_t r = enter("nvmlDeviceGetName");
  if (r) return r;
  if ((r = check_device(device))) return r;
  copy_string(name, length, device->name);
  return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
  nvmlReturn_t r = enter("nvmlDeviceGetUUID");
  if (r) return r;
  if ((r = check_device(device))) return r;
  copy_string(uuid, length, device->uuid);
  return NVML_SUCCESS;
}

#define NOT_AVAILABLE 0xFFFFFFFFFFFFFFFFULL
#define NA(d, bit, value) (((d)->not_available & (bit)) ? NOT_AVAILABLE : (value))

static void maybe_delay(void) {
  if (delay_us) {
    struct timespec ts = {delay_us / 1000000, (long)(delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
  nvmlReturn_t r = enter("nvmlDeviceGetMemoryInfo");
  if (r) return r;
  if ((r = check_device(device))) return r;
  maybe_delay();
  pthread_mutex_lock(&lock);
  /* v1: used counts the driver's reserved memory too. */
  memory->total = NA(device, 1, device->total);
  memory->used = NA(device, 4, device->used + device->reserved);
  memory->free = NA(device, 2, device->total - device->used - device->reserved);
  pthread_mutex_unlock(&lock);
  return NVML_SUCCESS;
}

#ifndef STUB_NO_MEMORY_V2
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
  nvmlReturn_t r = enter("nvmlDeviceGetMemoryInfo_v2");
  if (r) return r;
  if (v2_not_found) return NVML_ERROR_FUNCTION_NOT_FOUND;
  if ((r = check_device(device))) return r;
  if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  maybe_delay();
  pthread_mutex_lock(&lock);
  memory->total = NA(device, 1, device->total);
  memory->reserved = NA(device, 8, device->reserved);
  memory->used = NA(device, 4, device->used);
  memory->free = NA(device, 2, device->total - device->used - device->reserved);
  pthread_mutex_unlock(&lock);
  return NVML_SUCCESS;
}
#endif

static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, void *infos, int v1) {
  nvmlReturn_t r;
  if ((r = check_device(device))) return r;
  pthread_mutex_lock(&lock);
  unsigned int n = (unsigned int)device->nprocs;
  if (*count < n) {
    *count = n;
    pthread_mutex_unlock(&lock);
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  for (unsigned int i = 0; i < n; i++) {
    if (v1) {
      nvmlProcessInfo_v1_t *p = (nvmlProcessInfo_v1_t *)infos + i;
      p->pid = device->procs[i].pid;
      p->usedGpuMemory = device->procs[i].used;
    } else {
      nvmlProcessInfo_t *p = (nvmlProcessInfo_t *)infos + i;
      p->pid = device->procs[i].pid;
      p->usedGpuMemory = device->procs[i].used;
      p->gpuInstanceId = 0xFFFFFFFFu;
      p->computeInstanceId = 0xFFFFFFFFu;
    }
  }
  *count = n;
  pthread_mutex_unlock(&lock);
  return NVML_SUCCESS;
}

#ifndef STUB_NO_PROCESSES_V3
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
  nvmlReturn_t r = enter("nvmlDeviceGetComputeRunningProcesses_v3");
  if (r) return r;
  return processes(device, count, infos, 0);
}
#endif

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
  nvmlReturn_t r = enter("nvmlDeviceGetComputeRunningProcesses_v2");
  if (r) return r;
  return processes(device, count, infos, 0);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *count,
                                                  nvmlProcessInfo_v1_t *infos) {
  nvmlReturn_t r = enter("nvmlDeviceGetComputeRunningProcesses");
  if (r) return r;
  return processes(device, count, infos, 1);
}
