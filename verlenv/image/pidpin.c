/* Preloaded into an extension build (LD_PRELOAD): cudafe++ is told a fixed process ID.
 *
 * cudafe++ writes getpid() in decimal into the names it gives internal-linkage entities
 * (_INTERNAL_..._cu_<hash>_<pid>...), so two compiles of one CUDA source differ in bytes and in
 * length. Only cudafe++ is pinned: nvcc names its temp files by its own PID, and parallel nvcc
 * processes sharing /tmp must keep distinct names (objnorm zeroes that PID afterwards).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

pid_t getpid(void) {
    if (strcmp(program_invocation_short_name, "cudafe++") == 0)
        return 1;
    return (pid_t)syscall(SYS_getpid);
}
