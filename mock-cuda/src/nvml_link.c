/* Mock NVML, the links: the PCIe link's generation and width, current and maximum (MOCK_NVML_PCIE,
 * read through mock_gpu.h as the mock driver reads it), and the NVLink error counters.
 *
 * NVLink errors: MOCK_NVML_NVLINK_CRC="<unix_ms>:<count>[:<gpu>],..." (gpu -1, the default, every GPU):
 * from its time on, each entry adds `count` CRC flit errors to the device's counter (cumulative, as
 * NVML's), all on link 0. nvmlDeviceGetNvLinkErrorCounter reports them per link (the others 0), the
 * field values NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL (38) their sum; the CRC data, replay and
 * recovery totals (45, 52, 59) stay 0. Every link of NVML_NVLINK_MAX_LINKS is active. */
#include "nvml_int.h"
#include <stdint.h>

struct crc { uint64_t ms, count; int gpu; };
static struct crc g_crc[LIST_MAX];
static int g_ncrc;
static struct mock_pcie g_pcie[MOCK_GPU_MAX];

static int parse_crc(char **f, int nf, const char **why) {
    struct crc c = {0, 0, -1};
    if (nf < 2 || nf > 3) { *why = "want <unix_ms>:<count>[:<gpu>]"; return 0; }
    if (!mock_u64(f[0], &c.ms, 0) || c.ms > 18000000000000ull) { *why = "bad time (unix ms)"; return 0; }
    if (!mock_u64(f[1], &c.count, 0) || c.count > (1ull << 40)) { *why = "bad count"; return 0; }
    if (nf == 3 && !mock_gpu_index(f[2], &c.gpu)) { *why = "bad gpu (-1 or 0 .. 7)"; return 0; }
    if (g_ncrc >= LIST_MAX) { *why = "too many (64)"; return 0; }
    g_crc[g_ncrc++] = c;
    return 1;
}
void link_load_config(void) {
    mock_pcie_parse("mocknvml", g_pcie);
    g_ncrc = 0;
    nvml_env_list("MOCK_NVML_NVLINK_CRC", 3, parse_crc);
}
unsigned long long nvlink_crc_errors(int i) {
    uint64_t now_ms = mock_unix_ns() / 1000000ull, n = 0;
    for (int k = 0; k < g_ncrc; k++)
        if ((g_crc[k].gpu == -1 || g_crc[k].gpu == i) && g_crc[k].ms <= now_ms) n += g_crc[k].count;
    return n;
}

/* ---- PCIe ---- */
#define LINK_QUERY(name, field)                                        \
    API nvmlReturn_t name(nvmlDevice_t device, unsigned int *out) {    \
        DEVICE(device, i);                                             \
        if (!out) return NVML_ERROR_INVALID_ARGUMENT;                  \
        *out = g_pcie[i].field;                                        \
        return NVML_SUCCESS;                                           \
    }
LINK_QUERY(nvmlDeviceGetCurrPcieLinkGeneration, gen)
LINK_QUERY(nvmlDeviceGetMaxPcieLinkGeneration, max_gen)
LINK_QUERY(nvmlDeviceGetGpuMaxPcieLinkGeneration, max_gen)
LINK_QUERY(nvmlDeviceGetCurrPcieLinkWidth, width)
LINK_QUERY(nvmlDeviceGetMaxPcieLinkWidth, max_width)

/* ---- NVLink ---- */
API nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive) {
    DEVICE(device, i);
    (void)i;
    if (!isActive || link >= NVML_NVLINK_MAX_LINKS) return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}
API nvmlReturn_t nvmlDeviceGetNvLinkErrorCounter(nvmlDevice_t device, unsigned int link,
                                                 nvmlNvLinkErrorCounter_t counter, unsigned long long *counterValue) {
    DEVICE(device, i);
    if (!counterValue || link >= NVML_NVLINK_MAX_LINKS || (unsigned)counter >= NVML_NVLINK_ERROR_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *counterValue = link == 0 && counter == NVML_NVLINK_ERROR_DL_CRC_FLIT ? nvlink_crc_errors(i) : 0;
    return NVML_SUCCESS;
}
