/* tpudata._native: optional C accelerator for the batch-level hot paths.
 *
 * Everything here has a pure Python + numpy twin (tpudata/tfrecord/framing.py,
 * tpudata/tfrecord/whole.py and tpudata/example/wire.py) that is the tested reference; the test
 * suite runs both paths and compares them. No numpy C API: arrays arrive through the buffer
 * protocol. locate() and decode() live in _native_example.c, included below.
 *
 *   crc32c(data, value=0)                      standard CRC32C, continuing from `value`
 *   scan(buf, pos, end, verify, offs, lens)    TFRecord framing scan (see framing.py)
 *   read_files(paths, max_size, max_recs, v)   whole small files read and framed (whole.py)
 *   frame(records)                             TFRecord framing of a sequence of buffers
 *   split(buf, offs, lens)                     list of bytes objects for slices of buf
 *   locate(buf, offs, lens, keys, locs[, bidx])   Example -> location of each wanted Feature
 *   decode(buf, locs, nkeys, fidx, kind, mode, n, out, aux[, bidx])   Feature values into arrays
 *     (buf: one buffer, or a tuple of buffers with bidx, int32 per record: which one holds it)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define TPD_BIG_ENDIAN 1
#else
#define TPD_BIG_ENDIAN 0
#endif

static inline uint64_t ld64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if TPD_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
#if TPD_BIG_ENDIAN
    v = __builtin_bswap32(v);
#endif
    return v;
}

static inline void st64(uint8_t *p, uint64_t v) {
#if TPD_BIG_ENDIAN
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

static inline void st32(uint8_t *p, uint32_t v) {
#if TPD_BIG_ENDIAN
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}

/* ------------------------------------------------------------------------------------------ */
/* CRC32C (Castagnoli). "raw" functions work on the register without the pre/post inversion.  */

#define CRC_POLY 0x82F63B78u
#define CRC_BLOCK 8192 /* bytes per lane in the 3-lane hardware loop */

static uint32_t crc_table[8][256];
static uint32_t shift_b[4][256];  /* register after CRC_BLOCK zero bytes */
static uint32_t shift_2b[4][256]; /* register after 2 * CRC_BLOCK zero bytes */
static int have_hw = 0;

static void crc_init_tables(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ CRC_POLY : c >> 1;
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = crc_table[0][i];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xff] ^ (c >> 8);
            crc_table[t][i] = c;
        }
    }
}

static uint32_t crc_raw_sw(uint32_t crc, const uint8_t *p, size_t n) {
#if !TPD_BIG_ENDIAN
    while (n && ((uintptr_t)p & 7)) {
        crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t w = ld64(p) ^ crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        n -= 8;
    }
#endif
    while (n--) crc = crc_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

static inline uint32_t shift_apply(uint32_t t[4][256], uint32_t c) {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <nmmintrin.h>
#define TPD_HAVE_X86 1

__attribute__((target("sse4.2"))) static uint32_t crc_raw_hw_serial(uint32_t crc, const uint8_t *p,
                                                                     size_t n) {
    uint64_t c = crc;
    while (n && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        n--;
    }
    while (n >= 8) {
        c = _mm_crc32_u64(c, ld64(p));
        p += 8;
        n -= 8;
    }
    while (n--) c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}

/* Three independent lanes hide the 3-cycle latency of the crc32 instruction; lanes are joined
 * with the linearity of the raw CRC: raw(s, A|B|C) = Z2b(raw(s, A)) ^ Zb(raw(0, B)) ^ raw(0, C). */
__attribute__((target("sse4.2"))) static uint32_t crc_raw_hw(uint32_t crc, const uint8_t *p,
                                                              size_t n) {
    while (n && ((uintptr_t)p & 7)) {
        crc = _mm_crc32_u8(crc, *p++);
        n--;
    }
    while (n >= 3 * CRC_BLOCK) {
        uint64_t c0 = crc, c1 = 0, c2 = 0;
        const uint8_t *q = p;
        for (size_t i = 0; i < CRC_BLOCK; i += 8, q += 8) {
            c0 = _mm_crc32_u64(c0, ld64(q));
            c1 = _mm_crc32_u64(c1, ld64(q + CRC_BLOCK));
            c2 = _mm_crc32_u64(c2, ld64(q + 2 * CRC_BLOCK));
        }
        crc = shift_apply(shift_2b, (uint32_t)c0) ^ shift_apply(shift_b, (uint32_t)c1) ^ (uint32_t)c2;
        p += 3 * CRC_BLOCK;
        n -= 3 * CRC_BLOCK;
    }
    return crc_raw_hw_serial(crc, p, n);
}

static int cpu_has_sse42(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_SSE4_2) != 0;
}
#else
#define TPD_HAVE_X86 0
#endif

static inline uint32_t crc_raw(uint32_t crc, const uint8_t *p, size_t n) {
#if TPD_HAVE_X86
    if (have_hw) return crc_raw_hw(crc, p, n);
#endif
    return crc_raw_sw(crc, p, n);
}

static inline uint32_t crc32c_value(const uint8_t *p, size_t n) { return ~crc_raw(~0u, p, n); }

static inline uint32_t mask_crc(uint32_t crc) {
    return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

/* Z_n as four byte tables: column k of the 32x32 GF(2) matrix is Z_n(1 << k). */
static void build_shift_table(uint32_t t[4][256], size_t nbytes) {
    static const uint8_t zeros[2 * CRC_BLOCK];
    uint32_t col[32];
    for (int k = 0; k < 32; k++) col[k] = crc_raw_sw(1u << k, zeros, nbytes);
    for (int byte = 0; byte < 4; byte++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t r = 0;
            for (int bit = 0; bit < 8; bit++)
                if (v & (1u << bit)) r ^= col[8 * byte + bit];
            t[byte][v] = r;
        }
}

/* Release the GIL only for work worth a thread switch: handing the GIL to another thread and
 * taking it back costs tens of microseconds on a busy VM, more than framing a small buffer. */
#define TPD_BEGIN_ALLOW_IF(big) {                                       \
        PyThreadState *_save = (big) ? PyEval_SaveThread() : NULL;
#define TPD_END_ALLOW_IF                                                \
        if (_save) PyEval_RestoreThread(_save);                         \
    }
#define TPD_RELEASE_BYTES (64 << 10) /* CRC/framing of 64 KiB: ~5-10 us */

/* ------------------------------------------------------------------------------------------ */
/* Buffer helpers                                                                              */

static int get_wbuf(PyObject *obj, Py_buffer *view, const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Format(PyExc_TypeError, "%s must be a writable C-contiguous buffer", what);
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* crc32c(data, value=0)                                                                       */

static PyObject *py_crc32c(PyObject *self, PyObject *args) {
    Py_buffer b;
    unsigned long value = 0;
    if (!PyArg_ParseTuple(args, "y*|k", &b, &value)) return NULL;
    uint32_t r;
    const uint8_t *p = (const uint8_t *)b.buf;
    size_t n = (size_t)b.len;
    TPD_BEGIN_ALLOW_IF(n > TPD_RELEASE_BYTES)
    r = ~crc_raw(~(uint32_t)value, p, n);
    TPD_END_ALLOW_IF
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(r);
}

/* ------------------------------------------------------------------------------------------ */
/* scan(buf, pos, end, verify, offsets, lengths) -> (count, pos, err, err_offset, need)
 *
 * Frames records in buf[pos:end]. Stops at the first of: capacity of offsets/lengths reached,
 * an incomplete record (need = bytes the next record occupies from pos, 12 if its header is not
 * complete yet), or a CRC mismatch (err 1: header at err_offset = record start; err 2: data at
 * err_offset = record start + 12). Offsets written are those of the record data. */

/* The scan loop (no GIL needed): frames records from *pos, returns the count; *pos, *err,
 * *err_off and *need as py_scan documents. */
static Py_ssize_t scan_core(const uint8_t *p, Py_ssize_t *pos_io, Py_ssize_t end, int verify,
                            int64_t *offs, int64_t *lens, Py_ssize_t cap, int *err,
                            Py_ssize_t *err_off, uint64_t *need) {
    Py_ssize_t pos = *pos_io, count = 0;
    while (count < cap) {
        Py_ssize_t avail = end - pos;
        if (avail < 12) {
            *need = 12;
            break;
        }
        uint64_t len = ld64(p + pos);
        if (verify && mask_crc(crc32c_value(p + pos, 8)) != ld32(p + pos + 8)) {
            *err = 1;
            *err_off = pos;
            break;
        }
        if ((uint64_t)avail < 16 || len > (uint64_t)(avail - 16)) {
            *need = len > UINT64_MAX - 16 ? UINT64_MAX : len + 16;
            break;
        }
        const uint8_t *d = p + pos + 12;
        if (verify && mask_crc(crc32c_value(d, (size_t)len)) != ld32(d + len)) {
            *err = 2;
            *err_off = pos + 12;
            break;
        }
        offs[count] = pos + 12;
        lens[count] = (int64_t)len;
        count++;
        pos += 16 + (Py_ssize_t)len;
    }
    *pos_io = pos;
    return count;
}

static PyObject *py_scan(PyObject *self, PyObject *args) {
    Py_buffer b, ob, lb;
    Py_ssize_t pos, end;
    int verify;
    PyObject *oo, *lo;
    if (!PyArg_ParseTuple(args, "y*nnpOO", &b, &pos, &end, &verify, &oo, &lo)) return NULL;
    if (get_wbuf(oo, &ob, "offsets") < 0) {
        PyBuffer_Release(&b);
        return NULL;
    }
    if (get_wbuf(lo, &lb, "lengths") < 0) {
        PyBuffer_Release(&b);
        PyBuffer_Release(&ob);
        return NULL;
    }
    if (pos < 0 || end < pos || end > b.len || ob.len != lb.len || ob.len % 8) {
        PyBuffer_Release(&b);
        PyBuffer_Release(&ob);
        PyBuffer_Release(&lb);
        PyErr_SetString(PyExc_ValueError, "scan: bad positions or output arrays");
        return NULL;
    }
    Py_ssize_t count = 0, err_off = -1;
    int err = 0;
    uint64_t need = 0;
    TPD_BEGIN_ALLOW_IF(end - pos >= TPD_RELEASE_BYTES)
    count = scan_core((const uint8_t *)b.buf, &pos, end, verify, (int64_t *)ob.buf,
                      (int64_t *)lb.buf, ob.len / 8, &err, &err_off, &need);
    TPD_END_ALLOW_IF
    PyBuffer_Release(&b);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&lb);
    return Py_BuildValue("nninK", count, pos, err, err_off, (unsigned long long)need);
}

/* ------------------------------------------------------------------------------------------ */
/* find_frame(buf, pos, end) -> offset of the first valid record frame at or after pos, or -1.
 * Valid: header CRC matches and, when the whole record lies inside buf[:end], its data CRC too.
 * Used to resynchronise after corruption (tpudata verify --all). */

static PyObject *py_find_frame(PyObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t pos, end;
    if (!PyArg_ParseTuple(args, "y*nn", &b, &pos, &end)) return NULL;
    if (pos < 0 || end < pos || end > b.len) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_ValueError, "find_frame: bad positions");
        return NULL;
    }
    const uint8_t *p = (const uint8_t *)b.buf;
    Py_ssize_t found = -1;
    Py_BEGIN_ALLOW_THREADS for (; pos + 12 <= end; pos++) {
        if (mask_crc(crc32c_value(p + pos, 8)) != ld32(p + pos + 8)) continue;
        uint64_t len = ld64(p + pos);
        if (len <= (uint64_t)(end - pos - 12) && (uint64_t)(end - pos - 12) - len >= 4) {
            if (mask_crc(crc32c_value(p + pos + 12, (size_t)len)) != ld32(p + pos + 12 + len))
                continue;
        }
        found = pos;
        break;
    }
    Py_END_ALLOW_THREADS PyBuffer_Release(&b);
    return PyLong_FromSsize_t(found);
}

/* ------------------------------------------------------------------------------------------ */
/* frame(records) -> bytes                                                                     */

static PyObject *py_frame(PyObject *self, PyObject *arg) {
    PyObject *seq = PySequence_Fast(arg, "frame() needs a sequence of bytes-like objects");
    if (!seq) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer *views = PyMem_Calloc(n ? n : 1, sizeof(Py_buffer));
    if (!views) {
        Py_DECREF(seq);
        return PyErr_NoMemory();
    }
    Py_ssize_t got = 0, total = 0;
    PyObject *out = NULL;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(items[got], &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        total += views[got].len + 16;
    }
    out = PyBytes_FromStringAndSize(NULL, total);
    if (!out) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n; i++) {
        size_t len = (size_t)views[i].len;
        st64(o, (uint64_t)len);
        st32(o + 8, mask_crc(crc32c_value(o, 8)));
        memcpy(o + 12, views[i].buf, len);
        st32(o + 12 + len, mask_crc(crc32c_value((const uint8_t *)views[i].buf, len)));
        o += 16 + len;
    }
    Py_END_ALLOW_THREADS done : for (Py_ssize_t i = 0; i < got; i++) PyBuffer_Release(&views[i]);
    PyMem_Free(views);
    Py_DECREF(seq);
    return out;
}

/* ------------------------------------------------------------------------------------------ */
/* split(buf, offsets, lengths) -> list[bytes]                                                 */

static PyObject *py_split(PyObject *self, PyObject *args) {
    Py_buffer b, ob, lb;
    if (!PyArg_ParseTuple(args, "y*y*y*", &b, &ob, &lb)) return NULL;
    PyObject *list = NULL;
    if (ob.len != lb.len || ob.len % 8) {
        PyErr_SetString(PyExc_ValueError, "split: offsets and lengths must be int64 of one size");
        goto done;
    }
    Py_ssize_t n = ob.len / 8;
    const int64_t *offs = (const int64_t *)ob.buf, *lens = (const int64_t *)lb.buf;
    list = PyList_New(n);
    if (!list) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (offs[i] < 0 || lens[i] < 0 || offs[i] > b.len || lens[i] > b.len - offs[i]) {
            Py_CLEAR(list);
            PyErr_SetString(PyExc_ValueError, "split: slice outside the buffer");
            goto done;
        }
        PyObject *item = PyBytes_FromStringAndSize((const char *)b.buf + offs[i], lens[i]);
        if (!item) {
            Py_CLEAR(list);
            goto done;
        }
        PyList_SET_ITEM(list, i, item);
    }
done:
    PyBuffer_Release(&b);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&lb);
    return list;
}

/* ------------------------------------------------------------------------------------------ */
/* Example wire format: locate() and decode() (kept in a file of their own)                     */

#include "_native_example.c"

/* ------------------------------------------------------------------------------------------ */
/* read_files(paths, max_size, max_records, verify) -> [None or (buf, nread, count, pos, err,
 *                                                       err_offset, need, offsets, lengths)]
 *
 * Whole small files (tpudata/tfrecord/whole.py), all without the GIL but for allocating their
 * buffers: opens and fstats every path (bytes); a regular file of 1 to max_size bytes gets a
 * bytearray of its size, is read from byte 0 (pread, until full or the end) and framed as
 * scan(buf, 0, nread, ...) does, at most max_records records into two bytearrays of int64
 * (offsets, lengths); every file is closed. None: the path does not qualify or would not open
 * (the caller reads it the general way, which reports any error). nread is -errno when a read
 * failed (nothing framed). */

#ifndef _WIN32
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    const char *path;
    int fd;
    Py_ssize_t size, cap, nread, count, pos, err_off;
    int err;
    uint64_t need;
    PyObject *buf, *offs, *lens;
} file_job;

static PyObject *py_read_files(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_ssize_t max_size, max_records;
    int verify;
    if (!PyArg_ParseTuple(args, "Onnp", &seq, &max_size, &max_records, &verify)) return NULL;
    /* A tuple of our own: the paths stay alive while the GIL is released even if the caller's
     * list changes meanwhile (PySequence_Fast would hand back the list itself). */
    PyObject *fast = PySequence_Tuple(seq);
    if (!fast) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_SetString(PyExc_TypeError, "read_files: paths must be a sequence of bytes");
        }
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(fast), i;
    file_job *jobs = PyMem_Calloc(n ? n : 1, sizeof(file_job));
    PyObject *result = NULL;
    if (!jobs) {
        Py_DECREF(fast);
        return PyErr_NoMemory();
    }
    /* Every fd is -1 before anything can fail: the cleanup below closes only what was opened
     * (calloc's 0 would otherwise close the caller's stdin). */
    for (i = 0; i < n; i++) jobs[i].fd = -1;
    for (i = 0; i < n; i++) {
        PyObject *p = PyTuple_GET_ITEM(fast, i);
        if (!PyBytes_Check(p)) {
            PyErr_Format(PyExc_TypeError, "read_files: paths must be bytes (os.fsencode(path)), "
                         "item %zd is %.100s", i, Py_TYPE(p)->tp_name);
            goto done;
        }
        /* an embedded NUL: no such file (None; the general path reports the error) */
        jobs[i].path = strlen(PyBytes_AS_STRING(p)) == (size_t)PyBytes_GET_SIZE(p)
                           ? PyBytes_AS_STRING(p) : NULL;
    }
    Py_BEGIN_ALLOW_THREADS for (i = 0; i < n; i++) {
        file_job *j = &jobs[i];
        if (j->path == NULL) continue;
        int fd = open(j->path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
            st.st_size > max_size) {
            close(fd);
            continue;
        }
        j->fd = fd;
        j->size = (Py_ssize_t)st.st_size;
    }
    Py_END_ALLOW_THREADS for (i = 0; i < n; i++) {
        file_job *j = &jobs[i];
        if (j->fd < 0) continue;
        j->cap = j->size / 16 + 1 < max_records ? j->size / 16 + 1 : max_records;
        if (j->cap < 1) j->cap = 1;
        j->buf = PyByteArray_FromStringAndSize(NULL, j->size);
        j->offs = PyByteArray_FromStringAndSize(NULL, j->cap * 8);
        j->lens = PyByteArray_FromStringAndSize(NULL, j->cap * 8);
        if (!j->buf || !j->offs || !j->lens) goto done;
    }
    Py_BEGIN_ALLOW_THREADS for (i = 0; i < n; i++) {
        file_job *j = &jobs[i];
        if (j->fd < 0) continue;
        uint8_t *p = (uint8_t *)PyByteArray_AS_STRING(j->buf);
        Py_ssize_t filled = 0;
        while (filled < j->size) {
            ssize_t r = pread(j->fd, p + filled, (size_t)(j->size - filled), (off_t)filled);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) {
                filled = -errno;
                break;
            }
            if (r == 0) break;
            filled += r;
        }
        close(j->fd);
        j->fd = -1;
        j->nread = filled;
        j->err_off = -1;
        if (filled > 0) {
            Py_ssize_t pos = 0;
            j->count = scan_core(p, &pos, filled, verify,
                                 (int64_t *)PyByteArray_AS_STRING(j->offs),
                                 (int64_t *)PyByteArray_AS_STRING(j->lens), j->cap, &j->err,
                                 &j->err_off, &j->need);
            j->pos = pos;
        } else if (filled == 0) {
            j->need = 12;
        }
    }
    Py_END_ALLOW_THREADS result = PyList_New(n);
    for (i = 0; result && i < n; i++) {
        file_job *j = &jobs[i];
        PyObject *v;
        if (!j->buf) {
            Py_INCREF(Py_None);
            v = Py_None;
        } else {
            v = Py_BuildValue("OnnninKOO", j->buf, j->nread, j->count, j->pos, j->err,
                              j->err_off, (unsigned long long)j->need, j->offs, j->lens);
            if (!v) {
                Py_CLEAR(result);
                break;
            }
        }
        PyList_SET_ITEM(result, i, v);
    }
done:
    for (i = 0; i < n; i++) {
        if (jobs[i].fd >= 0) close(jobs[i].fd);
        Py_XDECREF(jobs[i].buf);
        Py_XDECREF(jobs[i].offs);
        Py_XDECREF(jobs[i].lens);
    }
    PyMem_Free(jobs);
    Py_DECREF(fast);
    return result;
}
#endif
/* ------------------------------------------------------------------------------------------ */

static PyMethodDef methods[] = {
    {"crc32c", py_crc32c, METH_VARARGS, "crc32c(data, value=0) -> int"},
    {"scan", py_scan, METH_VARARGS,
     "scan(buf, pos, end, verify, offsets, lengths) -> (count, pos, err, err_offset, need)"},
#ifndef _WIN32
    {"read_files", py_read_files, METH_VARARGS,
     "read_files(paths, max_size, max_records, verify) -> [None or (buf, nread, count, pos, err, "
     "err_offset, need, offsets, lengths)]"},
#endif
    {"frame", py_frame, METH_O, "frame(records) -> bytes of TFRecord framing"},
    {"find_frame", py_find_frame, METH_VARARGS, "find_frame(buf, pos, end) -> offset or -1"},
    {"split", py_split, METH_VARARGS, "split(buf, offsets, lengths) -> list of bytes"},
    {"locate", py_locate, METH_VARARGS,
     "locate(buf, offsets, lengths, keys, locs[, bidx]) -> (bad_record, bad_position)"},
    {"decode", py_decode, METH_VARARGS,
     "decode(buf, locs, nkeys, fidx, kind, mode, n, out, aux[, bidx]) -> (err, rec, kind, count, off)"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "_native",
                                       "C accelerator for tpudata's hot paths", -1, methods};

PyMODINIT_FUNC PyInit__native(void) {
    crc_init_tables();
    build_shift_table(shift_b, CRC_BLOCK);
    build_shift_table(shift_2b, 2 * CRC_BLOCK);
#if TPD_HAVE_X86
    have_hw = cpu_has_sse42();
#endif
    PyObject *m = PyModule_Create(&moduledef);
    if (!m) return NULL;
    PyModule_AddIntConstant(m, "HARDWARE_CRC", have_hw);
    return m;
}
