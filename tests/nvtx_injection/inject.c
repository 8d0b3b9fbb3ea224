/*
 * A minimal NVTX injection library for tests: it records NVTX events as text, so that tests can check the ranges
 * perf_callbacks emits without Nsight Systems or a GPU.
 *
 * Load it by starting a process with NVTX_INJECTION64_PATH=<this .so> and NVTX_LOG=<file>. Each NVTX copy in the
 * process (the nvtx package's extension modules, libtorch, ...) calls InitializeInjectionNvtx2 once, at its first
 * NVTX call; the library then appends one tab-separated line per event to NVTX_LOG, with a single write(2) on an
 * O_APPEND descriptor so nothing is buffered and an abrupt exit loses nothing:
 *
 *   push   <tid> <domain> <message> <category> <payload>     nvtxDomainRangePushEx, nvtxRangePushEx/A
 *   pop    <tid> <domain>                                    nvtxDomainRangePop, nvtxRangePop
 *   mark   <tid> <domain> <message> <category> <payload>     nvtxDomainMarkEx, nvtxMarkEx/A
 *   start  <tid> <domain> <message> <category> <payload> <id>  nvtxDomainRangeStartEx, nvtxRangeStartEx/A
 *   end    <tid> <domain> <id>                               nvtxDomainRangeEnd, nvtxRangeEnd
 *   domain <tid> <domain>                                    nvtxDomainCreateA
 *
 * The default (non-domain) API logs the domain as an empty field. <category> is the name given with
 * nvtx[Domain]NameCategoryA, else the number, else empty (category 0); <payload> is empty when there is none.
 * Tabs and newlines inside strings are replaced by spaces.
 *
 * The declarations below are copied from NVTX v3 (nvToolsExt.h, nvtxDetail/nvtxTypes.h), Copyright (c) 2009-2025
 * NVIDIA CORPORATION & AFFILIATES, licensed under the Apache License, Version 2.0 with LLVM exceptions
 * (https://nvidia.github.io/NVTX/LICENSE.txt), so that this file builds without the CUDA toolkit.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <wchar.h>

/* ---- copied from NVTX v3 ---------------------------------------------------------------------------------------- */
typedef struct nvtxDomainRegistration_st nvtxDomainRegistration;
typedef nvtxDomainRegistration* nvtxDomainHandle_t;
typedef struct nvtxStringRegistration_st nvtxStringRegistration;
typedef nvtxStringRegistration* nvtxStringHandle_t;
typedef uint64_t nvtxRangeId_t;

enum { NVTX_MESSAGE_TYPE_ASCII = 1, NVTX_MESSAGE_TYPE_UNICODE = 2, NVTX_MESSAGE_TYPE_REGISTERED = 3 };
enum {
    NVTX_PAYLOAD_TYPE_UNSIGNED_INT64 = 1, NVTX_PAYLOAD_TYPE_INT64 = 2, NVTX_PAYLOAD_TYPE_DOUBLE = 3,
    NVTX_PAYLOAD_TYPE_UNSIGNED_INT32 = 4, NVTX_PAYLOAD_TYPE_INT32 = 5, NVTX_PAYLOAD_TYPE_FLOAT = 6
};

typedef union nvtxMessageValue_t {
    const char* ascii;
    const wchar_t* unicode;
    nvtxStringHandle_t registered;
} nvtxMessageValue_t;

typedef struct nvtxEventAttributes_v2 {
    uint16_t version;
    uint16_t size;
    uint32_t category;
    int32_t colorType;
    uint32_t color;
    int32_t payloadType;
    int32_t reserved0;
    union payload_t {
        uint64_t ullValue;
        int64_t llValue;
        double dValue;
        uint32_t uiValue;
        int32_t iValue;
        float fValue;
    } payload;
    int32_t messageType;
    nvtxMessageValue_t message;
} nvtxEventAttributes_t;

typedef void (*NvtxFunctionPointer)(void);
typedef NvtxFunctionPointer** NvtxFunctionTable;
typedef const void* (*NvtxGetExportTableFunc_t)(uint32_t exportTableId);

enum { NVTX_ETID_CALLBACKS = 1, NVTX_ETID_VERSIONINFO = 3 };
enum { NVTX_CB_MODULE_CORE = 1, NVTX_CB_MODULE_CORE2 = 5 };
enum {
    NVTX_CBID_CORE_MarkEx = 1, NVTX_CBID_CORE_MarkA = 2, NVTX_CBID_CORE_RangeStartEx = 4,
    NVTX_CBID_CORE_RangeStartA = 5, NVTX_CBID_CORE_RangeEnd = 7, NVTX_CBID_CORE_RangePushEx = 8,
    NVTX_CBID_CORE_RangePushA = 9, NVTX_CBID_CORE_RangePop = 11, NVTX_CBID_CORE_NameCategoryA = 12
};
enum {
    NVTX_CBID_CORE2_DomainMarkEx = 1, NVTX_CBID_CORE2_DomainRangeStartEx = 2, NVTX_CBID_CORE2_DomainRangeEnd = 3,
    NVTX_CBID_CORE2_DomainRangePushEx = 4, NVTX_CBID_CORE2_DomainRangePop = 5,
    NVTX_CBID_CORE2_DomainNameCategoryA = 8, NVTX_CBID_CORE2_DomainRegisterStringA = 10,
    NVTX_CBID_CORE2_DomainCreateA = 12
};

typedef struct NvtxExportTableCallbacks {
    size_t struct_size;
    int (*GetModuleFunctionTable)(int callback_module, NvtxFunctionTable* out_table, unsigned int* out_size);
} NvtxExportTableCallbacks;

typedef struct NvtxExportTableVersionInfo {
    size_t struct_size;
    uint32_t version;
    uint32_t reserved0;
    void (*SetInjectionNvtxVersion)(uint32_t version);
} NvtxExportTableVersionInfo;
/* ---- end of NVTX declarations ----------------------------------------------------------------------------------- */

#define MAX_CATEGORIES 256

typedef struct Category { uint32_t id; char* name; } Category;

/* What an nvtxDomainHandle_t points to here. Domain 0 is the default domain (empty name). */
struct nvtxDomainRegistration_st {
    char* name;
    Category categories[MAX_CATEGORIES];
    int n_categories;
};

/* What an nvtxStringHandle_t points to here. */
struct nvtxStringRegistration_st { char* text; };

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_fd = -1;
static struct nvtxDomainRegistration_st g_default_domain = {"", {{0, NULL}}, 0};
static uint64_t g_next_range_id = 1;

static char* dup_clean(const char* s) {
    char* out = strdup(s ? s : "");
    for (char* p = out; out && *p; ++p) {
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
    }
    return out;
}

static void emit(const char* line, int len) {
    if (g_fd >= 0 && len > 0) {
        ssize_t ignored = write(g_fd, line, (size_t)len);
        (void)ignored;
    }
}

static long tid(void) { return (long)syscall(SYS_gettid); }

static nvtxDomainHandle_t dom(nvtxDomainHandle_t d) { return d ? d : &g_default_domain; }

static const char* category_name(nvtxDomainHandle_t d, uint32_t id, char* buf, size_t n) {
    if (id == 0) return "";
    for (int i = 0; i < d->n_categories; ++i) {
        if (d->categories[i].id == id) return d->categories[i].name;
    }
    snprintf(buf, n, "%u", id);
    return buf;
}

static void name_category(nvtxDomainHandle_t d, uint32_t id, const char* name) {
    d = dom(d);
    pthread_mutex_lock(&g_lock);
    for (int i = 0; i < d->n_categories; ++i) {
        if (d->categories[i].id == id) {
            free(d->categories[i].name);
            d->categories[i].name = dup_clean(name);
            pthread_mutex_unlock(&g_lock);
            return;
        }
    }
    if (d->n_categories < MAX_CATEGORIES) {
        d->categories[d->n_categories].id = id;
        d->categories[d->n_categories].name = dup_clean(name);
        d->n_categories++;
    }
    pthread_mutex_unlock(&g_lock);
}

static void message_text(const nvtxEventAttributes_t* a, char* buf, size_t n) {
    buf[0] = '\0';
    if (!a) return;
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII && a->message.ascii) {
        snprintf(buf, n, "%s", a->message.ascii);
    } else if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED && a->message.registered) {
        snprintf(buf, n, "%s", a->message.registered->text);
    } else if (a->messageType == NVTX_MESSAGE_TYPE_UNICODE && a->message.unicode) {
        snprintf(buf, n, "%ls", a->message.unicode);
    }
    for (char* p = buf; *p; ++p) {
        if (*p == '\t' || *p == '\n' || *p == '\r') *p = ' ';
    }
}

static void payload_text(const nvtxEventAttributes_t* a, char* buf, size_t n) {
    buf[0] = '\0';
    if (!a) return;
    switch (a->payloadType) {
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT64: snprintf(buf, n, "%llu", (unsigned long long)a->payload.ullValue); break;
        case NVTX_PAYLOAD_TYPE_INT64: snprintf(buf, n, "%lld", (long long)a->payload.llValue); break;
        case NVTX_PAYLOAD_TYPE_DOUBLE: snprintf(buf, n, "%.17g", a->payload.dValue); break;
        case NVTX_PAYLOAD_TYPE_UNSIGNED_INT32: snprintf(buf, n, "%u", a->payload.uiValue); break;
        case NVTX_PAYLOAD_TYPE_INT32: snprintf(buf, n, "%d", a->payload.iValue); break;
        case NVTX_PAYLOAD_TYPE_FLOAT: snprintf(buf, n, "%.9g", (double)a->payload.fValue); break;
        default: break;
    }
}

/* push / mark / start: kind, tid, domain, message, category, payload [, id] */
static void emit_event(const char* kind, nvtxDomainHandle_t d, const nvtxEventAttributes_t* a, const uint64_t* id) {
    char msg[1024], cat_buf[32], payload[64], line[1400];
    d = dom(d);
    message_text(a, msg, sizeof msg);
    payload_text(a, payload, sizeof payload);
    const char* cat = category_name(d, a ? a->category : 0, cat_buf, sizeof cat_buf);
    int len = id ? snprintf(line, sizeof line, "%s\t%ld\t%s\t%s\t%s\t%s\t%llu\n", kind, tid(), d->name, msg, cat,
                            payload, (unsigned long long)*id)
                 : snprintf(line, sizeof line, "%s\t%ld\t%s\t%s\t%s\t%s\n", kind, tid(), d->name, msg, cat, payload);
    emit(line, len < (int)sizeof line ? len : (int)sizeof line - 1);
}

static void emit_short(const char* kind, nvtxDomainHandle_t d, const uint64_t* id) {
    char line[600];
    int len = id ? snprintf(line, sizeof line, "%s\t%ld\t%s\t%llu\n", kind, tid(), dom(d)->name, (unsigned long long)*id)
                 : snprintf(line, sizeof line, "%s\t%ld\t%s\n", kind, tid(), dom(d)->name);
    emit(line, len < (int)sizeof line ? len : (int)sizeof line - 1);
}

static nvtxEventAttributes_t ascii_attrs(const char* message) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    return a;
}

static uint64_t next_id(void) { return __atomic_fetch_add(&g_next_range_id, 1, __ATOMIC_RELAXED); }

/* ---- CORE2 (domain) callbacks ----------------------------------------------------------------------------------- */
static nvtxDomainHandle_t cb_DomainCreateA(const char* name) {
    nvtxDomainHandle_t d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->name = dup_clean(name);
    emit_short("domain", d, NULL);
    return d;
}

static nvtxStringHandle_t cb_DomainRegisterStringA(nvtxDomainHandle_t d, const char* s) {
    (void)d;
    nvtxStringHandle_t h = calloc(1, sizeof *h);
    if (h) h->text = dup_clean(s);
    return h;
}

static void cb_DomainNameCategoryA(nvtxDomainHandle_t d, uint32_t id, const char* name) { name_category(d, id, name); }

static int cb_DomainRangePushEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
    emit_event("push", d, a, NULL);
    return 0;
}

static int cb_DomainRangePop(nvtxDomainHandle_t d) {
    emit_short("pop", d, NULL);
    return 0;
}

static void cb_DomainMarkEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) { emit_event("mark", d, a, NULL); }

static nvtxRangeId_t cb_DomainRangeStartEx(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
    uint64_t id = next_id();
    emit_event("start", d, a, &id);
    return id;
}

static void cb_DomainRangeEnd(nvtxDomainHandle_t d, nvtxRangeId_t id) { emit_short("end", d, &id); }

/* ---- CORE (default domain) callbacks ---------------------------------------------------------------------------- */
static int cb_RangePushEx(const nvtxEventAttributes_t* a) { return cb_DomainRangePushEx(NULL, a); }

static int cb_RangePushA(const char* message) {
    nvtxEventAttributes_t a = ascii_attrs(message);
    return cb_DomainRangePushEx(NULL, &a);
}

static int cb_RangePop(void) { return cb_DomainRangePop(NULL); }

static void cb_MarkEx(const nvtxEventAttributes_t* a) { cb_DomainMarkEx(NULL, a); }

static void cb_MarkA(const char* message) {
    nvtxEventAttributes_t a = ascii_attrs(message);
    cb_DomainMarkEx(NULL, &a);
}

static nvtxRangeId_t cb_RangeStartEx(const nvtxEventAttributes_t* a) { return cb_DomainRangeStartEx(NULL, a); }

static nvtxRangeId_t cb_RangeStartA(const char* message) {
    nvtxEventAttributes_t a = ascii_attrs(message);
    return cb_DomainRangeStartEx(NULL, &a);
}

static void cb_RangeEnd(nvtxRangeId_t id) { cb_DomainRangeEnd(NULL, id); }

static void cb_NameCategoryA(uint32_t id, const char* name) { name_category(NULL, id, name); }

/* ---- entry point ------------------------------------------------------------------------------------------------ */
static int install(const NvtxExportTableCallbacks* cbs, int module, const int* ids, NvtxFunctionPointer* fns, int n) {
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    if (!cbs->GetModuleFunctionTable(module, &table, &size) || !table) return 0;
    for (int i = 0; i < n; ++i) {
        if ((unsigned int)ids[i] < size && table[ids[i]]) *table[ids[i]] = fns[i];
    }
    return 1;
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t getExportTable) {
    const NvtxExportTableCallbacks* cbs = getExportTable(NVTX_ETID_CALLBACKS);
    if (!cbs || cbs->struct_size < sizeof(NvtxExportTableCallbacks)) return 0;

    const NvtxExportTableVersionInfo* info = getExportTable(NVTX_ETID_VERSIONINFO);
    if (info && info->struct_size >= sizeof(NvtxExportTableVersionInfo) && info->SetInjectionNvtxVersion) {
        info->SetInjectionNvtxVersion(3);
    }

    pthread_mutex_lock(&g_lock);
    if (g_fd < 0) {
        const char* path = getenv("NVTX_LOG");
        if (path && *path) g_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
    pthread_mutex_unlock(&g_lock);

    static const int core_ids[] = {
        NVTX_CBID_CORE_MarkEx, NVTX_CBID_CORE_MarkA, NVTX_CBID_CORE_RangeStartEx, NVTX_CBID_CORE_RangeStartA,
        NVTX_CBID_CORE_RangeEnd, NVTX_CBID_CORE_RangePushEx, NVTX_CBID_CORE_RangePushA, NVTX_CBID_CORE_RangePop,
        NVTX_CBID_CORE_NameCategoryA};
    NvtxFunctionPointer core_fns[] = {
        (NvtxFunctionPointer)cb_MarkEx, (NvtxFunctionPointer)cb_MarkA, (NvtxFunctionPointer)cb_RangeStartEx,
        (NvtxFunctionPointer)cb_RangeStartA, (NvtxFunctionPointer)cb_RangeEnd, (NvtxFunctionPointer)cb_RangePushEx,
        (NvtxFunctionPointer)cb_RangePushA, (NvtxFunctionPointer)cb_RangePop, (NvtxFunctionPointer)cb_NameCategoryA};
    static const int core2_ids[] = {
        NVTX_CBID_CORE2_DomainMarkEx, NVTX_CBID_CORE2_DomainRangeStartEx, NVTX_CBID_CORE2_DomainRangeEnd,
        NVTX_CBID_CORE2_DomainRangePushEx, NVTX_CBID_CORE2_DomainRangePop, NVTX_CBID_CORE2_DomainNameCategoryA,
        NVTX_CBID_CORE2_DomainRegisterStringA, NVTX_CBID_CORE2_DomainCreateA};
    NvtxFunctionPointer core2_fns[] = {
        (NvtxFunctionPointer)cb_DomainMarkEx, (NvtxFunctionPointer)cb_DomainRangeStartEx,
        (NvtxFunctionPointer)cb_DomainRangeEnd, (NvtxFunctionPointer)cb_DomainRangePushEx,
        (NvtxFunctionPointer)cb_DomainRangePop, (NvtxFunctionPointer)cb_DomainNameCategoryA,
        (NvtxFunctionPointer)cb_DomainRegisterStringA, (NvtxFunctionPointer)cb_DomainCreateA};

    int ok = install(cbs, NVTX_CB_MODULE_CORE, core_ids, core_fns, (int)(sizeof core_ids / sizeof *core_ids));
    ok &= install(cbs, NVTX_CB_MODULE_CORE2, core2_ids, core2_fns, (int)(sizeof core2_ids / sizeof *core2_ids));
    return ok;
}
