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
#endif
#endif
