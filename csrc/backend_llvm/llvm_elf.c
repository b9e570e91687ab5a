/* Linking a cached kernel's object file without ORC.
 *
 * A warm cache's hit only has to put an object file's code in memory and
 * fix its addresses; ORC's LLJIT does that too, but creating one costs a
 * new process ~1 ms (the execution session, its dylib, the process symbol
 * generator) before the first kernel is linked (~0.3 ms each more).  The
 * objects the LLVM back end emits are simple: x86-64 ELF relocatables of
 * the large code model (every address a 64-bit absolute R_X86_64_64),
 * code in .text/.ltext, constants in .rodata*, no writable data, no
 * unwind tables, calls to memset/memcpy at most.  This loader handles
 * exactly that and says "not mine" (0) for anything else -- another
 * relocation or section kind, an unknown symbol, another machine -- so
 * the caller links through ORC as before.  The entries are checksummed
 * and keyed on the compiler build (lower_cache.c) before they get here;
 * the loader still checks every offset against the object's bounds. */
#include "backend_llvm/backend_llvm.h"

#ifdef STAX_HAVE_LLVM
#include "backend_llvm/llvm_internal.h"

#include <dlfcn.h>
#include <elf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ELF_MAX_SECTIONS 64

static int
in_bounds(size_t n, uint64_t off, uint64_t len)
{
    return off <= n && len <= n - off;
}

int
stax_llvm_elf_load(const char *data, size_t n, const char *sym,
                   void *(*resolve)(const char *name), stax_llvm_elf_image *img)
{
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)data;
    uint64_t addr[ELF_MAX_SECTIONS];
    const Elf64_Shdr *sh;
    const Elf64_Sym *syms = NULL;
    const char *strs = NULL;
    size_t nsyms = 0, strsz = 0, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t text_end = 0, total = 0;
    char *map = NULL;
    void *entry = NULL;
    memset(img, 0, sizeof(*img));
    if (((uintptr_t)data & 7) != 0) {
        /* a blob of the cache entry starts anywhere: the headers and
         * tables are read in place, so align a copy */
        char *copy = malloc(n ? n : 1);
        if (copy == NULL) {
            return 0;
        }
        memcpy(copy, data, n);
        int rc = stax_llvm_elf_load(copy, n, sym, resolve, img);
        free(copy);
        return rc;
    }
    if (n < sizeof(Elf64_Ehdr)
        || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64
        || eh->e_ident[EI_DATA] != ELFDATA2LSB || eh->e_type != ET_REL
        || eh->e_machine != EM_X86_64 || eh->e_shentsize != sizeof(Elf64_Shdr)
        || eh->e_shnum == 0 || eh->e_shnum > ELF_MAX_SECTIONS
        || (eh->e_shoff & 7) != 0
        || !in_bounds(n, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr))) {
        return 0;
    }
    sh = (const Elf64_Shdr *)(data + eh->e_shoff);
    /* layout: executable sections first, then the read-only ones from the
     * next page, so that each part gets its own protection */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < eh->e_shnum; i++) {
            const Elf64_Shdr *s = &sh[i];
            if (!(s->sh_flags & SHF_ALLOC)) {
                continue;
            }
            if ((s->sh_flags & SHF_WRITE) || (s->sh_flags & SHF_TLS)
                || (s->sh_type != SHT_PROGBITS && s->sh_type != SHT_NOBITS)
                || (s->sh_type == SHT_PROGBITS && !in_bounds(n, s->sh_offset, s->sh_size))
                || s->sh_size > ((uint64_t)1 << 30)) {
                return 0;
            }
            if (((s->sh_flags & SHF_EXECINSTR) != 0) != (pass == 0)) {
                continue;
            }
            uint64_t al = s->sh_addralign ? s->sh_addralign : 1;
            if ((al & (al - 1)) != 0 || al > page) {
                return 0;
            }
            total = (total + al - 1) & ~(al - 1);
            addr[i] = total;
            total += s->sh_size;
        }
        if (pass == 0) {
            total = (total + page - 1) & ~(page - 1);
            text_end = total;
        }
    }
    if (total == 0 || text_end == 0) {
        return 0;
    }
    total = (total + page - 1) & ~(page - 1);
    for (int i = 0; i < eh->e_shnum; i++) {
        if (sh[i].sh_type == SHT_SYMTAB) {
            if (syms != NULL || sh[i].sh_entsize != sizeof(Elf64_Sym) || (sh[i].sh_offset & 7)
                || !in_bounds(n, sh[i].sh_offset, sh[i].sh_size) || sh[i].sh_link >= eh->e_shnum
                || sh[sh[i].sh_link].sh_type != SHT_STRTAB
                || !in_bounds(n, sh[sh[i].sh_link].sh_offset, sh[sh[i].sh_link].sh_size)
                || sh[sh[i].sh_link].sh_size == 0) {
                return 0;
            }
            syms = (const Elf64_Sym *)(data + sh[i].sh_offset);
            nsyms = sh[i].sh_size / sizeof(Elf64_Sym);
            strs = data + sh[sh[i].sh_link].sh_offset;
            strsz = sh[sh[i].sh_link].sh_size;
            if (strs[strsz - 1] != '\0') {
                return 0;
            }
        }
        else if (sh[i].sh_type == SHT_REL || sh[i].sh_type == SHT_DYNAMIC
                 || sh[i].sh_type == SHT_GROUP) {
            return 0;
        }
    }
    if (syms == NULL) {
        return 0;
    }
    map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) {
        return 0;
    }
    for (int i = 0; i < eh->e_shnum; i++) {
        if ((sh[i].sh_flags & SHF_ALLOC) && sh[i].sh_type == SHT_PROGBITS) {
            memcpy(map + addr[i], data + sh[i].sh_offset, sh[i].sh_size);
        }
    }
    for (int r = 0; r < eh->e_shnum; r++) {
        const Elf64_Shdr *rs = &sh[r];
        if (rs->sh_type != SHT_RELA) {
            continue;
        }
        if (rs->sh_info >= (Elf64_Word)eh->e_shnum || rs->sh_entsize != sizeof(Elf64_Rela)
            || (rs->sh_offset & 7) || !in_bounds(n, rs->sh_offset, rs->sh_size)) {
            goto unsupported;
        }
        const Elf64_Shdr *ts = &sh[rs->sh_info];
        if (!(ts->sh_flags & SHF_ALLOC)) {
            continue;       /* relocations of debug sections: not loaded */
        }
        const Elf64_Rela *rel = (const Elf64_Rela *)(data + rs->sh_offset);
        size_t nrel = rs->sh_size / sizeof(Elf64_Rela);
        for (size_t q = 0; q < nrel; q++) {
            uint64_t si = ELF64_R_SYM(rel[q].r_info);
            if (ELF64_R_TYPE(rel[q].r_info) != R_X86_64_64 || si >= nsyms
                || rel[q].r_offset > ts->sh_size || ts->sh_size - rel[q].r_offset < 8) {
                goto unsupported;
            }
            const Elf64_Sym *s = &syms[si];
            uint64_t S;
            if (s->st_shndx == SHN_UNDEF) {
                void *p = NULL;
                if (s->st_name >= strsz || (p = resolve(strs + s->st_name)) == NULL) {
                    goto unsupported;
                }
                S = (uint64_t)(uintptr_t)p;
            }
            else if (s->st_shndx == SHN_ABS) {
                S = s->st_value;
            }
            else if (s->st_shndx < eh->e_shnum && (sh[s->st_shndx].sh_flags & SHF_ALLOC)
                     && s->st_value <= sh[s->st_shndx].sh_size) {
                S = (uint64_t)(uintptr_t)(map + addr[s->st_shndx]) + s->st_value;
            }
            else {
                goto unsupported;
            }
            uint64_t v = S + (uint64_t)rel[q].r_addend;
            memcpy(map + addr[rs->sh_info] + rel[q].r_offset, &v, 8);
        }
    }
    for (size_t i = 0; i < nsyms; i++) {
        const Elf64_Sym *s = &syms[i];
        if (s->st_name < strsz && ELF64_ST_TYPE(s->st_info) == STT_FUNC
            && s->st_shndx != SHN_UNDEF && s->st_shndx < eh->e_shnum
            && (sh[s->st_shndx].sh_flags & SHF_EXECINSTR)
            && s->st_value < sh[s->st_shndx].sh_size && strcmp(strs + s->st_name, sym) == 0) {
            entry = map + addr[s->st_shndx] + s->st_value;
            break;
        }
    }
    if (entry == NULL || mprotect(map, text_end, PROT_READ | PROT_EXEC) != 0
        || (total > text_end && mprotect(map + text_end, total - text_end, PROT_READ) != 0)) {
        goto unsupported;
    }
    img->map = map;
    img->size = total;
    img->entry = entry;
    return 1;
unsupported:
    munmap(map, total);
    return 0;
}

void
stax_llvm_elf_unload(stax_llvm_elf_image *img)
{
    if (img->map != NULL) {
        munmap(img->map, img->size);
        img->map = NULL;
    }
}
#endif
