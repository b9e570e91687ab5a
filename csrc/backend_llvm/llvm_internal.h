/* Private to backend_llvm: LLVM-C includes and the module builder. */
#ifndef STAX_LLVM_INTERNAL_H
#define STAX_LLVM_INTERNAL_H
#ifdef STAX_HAVE_LLVM
#include "backend_llvm/backend_llvm.h"

#include <llvm-c/Analysis.h>
#include <llvm-c/Core.h>
#include <llvm-c/Error.h>
#include <llvm-c/LLJIT.h>
#include <llvm-c/Orc.h>
#include <llvm-c/Target.h>
#include <llvm-c/TargetMachine.h>
#include <llvm-c/Transforms/PassBuilder.h>

int stax_llvm_build_module(LLVMContextRef cx, LLVMModuleRef mod,
                           const stax_kernel *k, const char *sym,
                           const char *cpu, const char *features,
                           const char **err);

/* llvm_elf.c: a cached kernel's object file linked without ORC.  1 and
 * *img filled when the object is of the simple kind the back end emits
 * (x86-64 ELF, absolute 64-bit relocations, no writable data) and `sym`
 * is defined in it; 0 (nothing kept, no exception) for anything else: the
 * caller links through ORC.  resolve: the address of an undefined symbol,
 * or NULL. */
typedef struct {
    void *map;
    size_t size;
    void *entry;
} stax_llvm_elf_image;
int stax_llvm_elf_load(const char *data, size_t n, const char *sym,
                       void *(*resolve)(const char *name), stax_llvm_elf_image *img);
void stax_llvm_elf_unload(stax_llvm_elf_image *img);
#endif
#endif
