/* tpudata._native, part 2: the Example codec's wire-format kernels, locate() and decode().
 *
 * Not compiled on its own: _native.c includes it (one translation unit, so these functions share
 * its static helpers: buffers, little-endian loads). The pure Python twin is
 * tpudata/example/wire.py.
 */

/* ------------------------------------------------------------------------------------------ */
/* Protocol buffer wire format                                                                 */

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_SGROUP = 3, WT_EGROUP = 4, WT_I32 = 5 };
enum { KIND_NONE = 0, KIND_BYTES = 1, KIND_FLOAT = 2, KIND_INT64 = 3 };
enum { E_OK = 0, E_KIND = 1, E_COUNT = 2, E_MALFORMED = 3, E_MULTI = 4 };

static inline int rd_varint(const uint8_t **pp, const uint8_t *e, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p < e; shift += 7) {
        uint8_t c = *p++;
        if (shift == 63 && c > 1) return -1;
        v |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *pp = p;
            *out = v;
            return 0;
        }
    }
    return -1;
}

/* Reads a tag; for WT_LEN also the length, checked against e. Returns 0 or -1 (malformed). */
static inline int rd_field(const uint8_t **pp, const uint8_t *e, uint32_t *field, int *wt,
                           uint64_t *len) {
    uint64_t tag;
    if (rd_varint(pp, e, &tag) < 0 || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff) return -1;
    *field = (uint32_t)(tag >> 3);
    *wt = (int)(tag & 7);
    if (*wt == WT_LEN) {
        if (rd_varint(pp, e, len) < 0 || *len > (uint64_t)(e - *pp)) return -1;
    }
    return 0;
}

/* Skips a field's payload (after rd_field). */
static inline int skip_payload(const uint8_t **pp, const uint8_t *e, int wt, uint64_t len) {
    uint64_t v;
    switch (wt) {
        case WT_VARINT:
            return rd_varint(pp, e, &v);
        case WT_I64:
            if (e - *pp < 8) return -1;
            *pp += 8;
            return 0;
        case WT_LEN:
            *pp += len;
            return 0;
        case WT_I32:
            if (e - *pp < 4) return -1;
            *pp += 4;
            return 0;
        default:
            return -1; /* groups are not used by tf.train messages */
    }
}

typedef struct {
    const uint8_t **ptr;
    Py_ssize_t *len;
    Py_ssize_t n;
} keyset_t;

static inline Py_ssize_t find_key(const keyset_t *ks, const uint8_t *k, Py_ssize_t klen) {
    for (Py_ssize_t i = 0; i < ks->n; i++)
        if (ks->len[i] == klen && (klen == 0 || memcmp(ks->ptr[i], k, (size_t)klen) == 0)) return i;
    return -1;
}

/* Example{1: Features{1: map<string, Feature>}}: for each wanted key, the (offset, length) of its
 * Feature message (last entry wins, as protobuf maps do). An entry without a value gives length 0
 * (an empty Feature). Returns NULL or the position of malformed bytes. */
static const uint8_t *locate_one(const uint8_t *base, const uint8_t *p, const uint8_t *e,
                                 const keyset_t *ks, int64_t *row) {
    uint32_t f;
    int wt;
    uint64_t len;
    while (p < e) {
        const uint8_t *at = p;
        if (rd_field(&p, e, &f, &wt, &len) < 0) return at;
        if (!(f == 1 && wt == WT_LEN)) {
            if (skip_payload(&p, e, wt, len) < 0) return at;
            continue;
        }
        const uint8_t *fe = p + len; /* Features */
        while (p < fe) {
            const uint8_t *at2 = p;
            if (rd_field(&p, fe, &f, &wt, &len) < 0) return at2;
            if (!(f == 1 && wt == WT_LEN)) {
                if (skip_payload(&p, fe, wt, len) < 0) return at2;
                continue;
            }
            const uint8_t *ee = p + len; /* map entry */
            const uint8_t *key = p, *val = ee;
            uint64_t klen = 0, vlen = 0;
            while (p < ee) {
                const uint8_t *at3 = p;
                if (rd_field(&p, ee, &f, &wt, &len) < 0) return at3;
                if (f == 1 && wt == WT_LEN) {
                    key = p;
                    klen = len;
                } else if (f == 2 && wt == WT_LEN) {
                    val = p;
                    vlen = len;
                }
                if (skip_payload(&p, ee, wt, len) < 0) return at3;
            }
            Py_ssize_t k = find_key(ks, key, (Py_ssize_t)klen);
            if (k >= 0) {
                row[2 * k] = val - base;
                row[2 * k + 1] = (int64_t)vlen;
            }
        }
    }
    return NULL;
}

/* The records' buffers: one bytes-like object, or a tuple of them with bidx (int32 per record:
 * which buffer holds it), so a batch gathered from many read buffers parses in one call. */
typedef struct {
    Py_buffer *views;
    Py_ssize_t nb, nviews;
    int32_t *bidx; /* a private copy (checked once); NULL: every record is in views[0] */
} bufset_t;

static void bufset_release(bufset_t *s) {
    for (Py_ssize_t k = 0; k < s->nviews; k++) PyBuffer_Release(&s->views[k]);
    PyMem_Free(s->views);
    PyMem_Free(s->bidx);
    memset(s, 0, sizeof(*s));
}

/* Fills s from (bufo, bidxo) for n records; returns 0, or -1 with an exception set. */
static int bufset_get(PyObject *bufo, PyObject *bidxo, Py_ssize_t n, bufset_t *s, const char *fn) {
    memset(s, 0, sizeof(*s));
    int multi = PyTuple_Check(bufo);
    if (multi != (bidxo != NULL && bidxo != Py_None)) {
        PyErr_Format(PyExc_TypeError, "%s: a tuple of buffers needs bidx, one buffer takes none", fn);
        return -1;
    }
    s->nb = multi ? PyTuple_GET_SIZE(bufo) : 1;
    s->views = PyMem_Calloc(s->nb ? s->nb : 1, sizeof(Py_buffer));
    if (!s->views) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t k = 0; k < s->nb; k++) {
        PyObject *o = multi ? PyTuple_GET_ITEM(bufo, k) : bufo;
        if (PyObject_GetBuffer(o, &s->views[k], PyBUF_SIMPLE) < 0) {
            bufset_release(s);
            return -1;
        }
        s->nviews = k + 1;
    }
    if (!multi) return 0;
    Py_buffer ib;
    if (PyObject_GetBuffer(bidxo, &ib, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        bufset_release(s);
        return -1;
    }
    const char *fmt = ib.format ? ib.format : "B";
    size_t fl = strlen(fmt);
    int ok = ib.itemsize == 4 && fl && fmt[fl - 1] == 'i' && ib.len == n * 4;
    if (ok) {
        s->bidx = PyMem_Malloc(n ? (size_t)n * 4 : 1);
        if (s->bidx) memcpy(s->bidx, ib.buf, (size_t)n * 4);
    }
    PyBuffer_Release(&ib);
    if (!ok) {
        PyErr_Format(PyExc_ValueError, "%s: bidx must be an int32 array with one entry per record", fn);
        bufset_release(s);
        return -1;
    }
    if (!s->bidx) {
        bufset_release(s);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (s->bidx[i] < 0 || s->bidx[i] >= s->nb) {
            PyErr_Format(PyExc_ValueError, "%s: bidx[%zd] = %d names no given buffer", fn, i,
                         (int)s->bidx[i]);
            bufset_release(s);
            return -1;
        }
    return 0;
}

static inline const Py_buffer *bufset_at(const bufset_t *s, Py_ssize_t i) {
    return &s->views[s->bidx ? s->bidx[i] : 0];
}

static PyObject *py_locate(PyObject *self, PyObject *args) {
    Py_buffer ob, lb, locb;
    PyObject *bufo, *keys, *loco, *bidxo = NULL;
    bufset_t bs = {0};
    if (!PyArg_ParseTuple(args, "Oy*y*O!O|O", &bufo, &ob, &lb, &PyTuple_Type, &keys, &loco, &bidxo))
        return NULL;
    PyObject *result = NULL;
    keyset_t ks = {NULL, NULL, PyTuple_GET_SIZE(keys)};
    int have_loc = 0, have_bs = 0;
    if (get_wbuf(loco, &locb, "locs") < 0) goto done;
    have_loc = 1;
    Py_ssize_t n = ob.len / 8;
    Py_ssize_t want_locs;
    if (ob.len != lb.len || ob.len % 8 || __builtin_mul_overflow(n, ks.n, &want_locs) ||
        __builtin_mul_overflow(want_locs, (Py_ssize_t)16, &want_locs) || locb.len != want_locs) {
        PyErr_SetString(PyExc_ValueError, "locate: array sizes do not match");
        goto done;
    }
    if (bufset_get(bufo, bidxo, n, &bs, "locate") < 0) goto done;
    have_bs = 1;
    ks.ptr = PyMem_Calloc(ks.n ? ks.n : 1, sizeof(uint8_t *));
    ks.len = PyMem_Calloc(ks.n ? ks.n : 1, sizeof(Py_ssize_t));
    if (!ks.ptr || !ks.len) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ks.n; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        if (!PyBytes_Check(k)) {
            PyErr_SetString(PyExc_TypeError, "locate: keys must be bytes");
            goto done;
        }
        ks.ptr[i] = (const uint8_t *)PyBytes_AS_STRING(k);
        ks.len[i] = PyBytes_GET_SIZE(k);
    }
    const int64_t *offs = (const int64_t *)ob.buf, *lens = (const int64_t *)lb.buf;
    int64_t *locs = (int64_t *)locb.buf;
    Py_ssize_t bad_rec = -1, bad_pos = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t blen = bufset_at(&bs, i)->len;
        if (offs[i] < 0 || lens[i] < 0 || offs[i] > blen || lens[i] > blen - offs[i]) {
            PyErr_SetString(PyExc_ValueError, "locate: record outside the buffer");
            goto done;
        }
    }
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t i = 0; i < n * ks.n * 2; i += 2) {
        locs[i] = -1;
        locs[i + 1] = 0;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *base = (const uint8_t *)bufset_at(&bs, i)->buf;
        const uint8_t *bad =
            locate_one(base, base + offs[i], base + offs[i] + lens[i], &ks, locs + i * ks.n * 2);
        if (bad) {
            bad_rec = i;
            bad_pos = bad - (base + offs[i]);
            break;
        }
    }
    Py_END_ALLOW_THREADS result = Py_BuildValue("nn", bad_rec, bad_pos);
done:
    PyMem_Free(ks.ptr);
    PyMem_Free(ks.len);
    if (have_bs) bufset_release(&bs);
    PyBuffer_Release(&ob);
    PyBuffer_Release(&lb);
    if (have_loc) PyBuffer_Release(&locb);
    return result;
}

/* Feature{1: BytesList, 2: FloatList, 3: Int64List} (a oneof). More than one list field in one
 * Feature is rejected: protobuf would keep the last, TensorFlow's parser the first. */
static int feature_list(const uint8_t *p, const uint8_t *e, int *kind, const uint8_t **lp,
                        const uint8_t **le, const uint8_t **bad) {
    uint32_t f;
    int wt;
    uint64_t len;
    *kind = KIND_NONE;
    while (p < e) {
        const uint8_t *at = p;
        if (rd_field(&p, e, &f, &wt, &len) < 0) {
            *bad = at;
            return E_MALFORMED;
        }
        if (wt == WT_LEN && f >= 1 && f <= 3) {
            if (*kind != KIND_NONE) {
                *bad = at;
                return E_MULTI;
            }
            *kind = (int)f;
            *lp = p;
            *le = p + len;
        }
        if (skip_payload(&p, e, wt, len) < 0) {
            *bad = at;
            return E_MALFORMED;
        }
    }
    return E_OK;
}

/* Decodes the values of a list message [p, e) of `kind`. Writes at most `cap` values to out
 * (float32, int64, or (offset, length) int64 pairs for bytes; out may be NULL) and returns
 * the number of values found in *count. */
static int list_values(const uint8_t *base, const uint8_t *p, const uint8_t *e, int kind, void *out,
                       int64_t cap, int64_t *count, const uint8_t **bad) {
    uint32_t f;
    int wt;
    uint64_t len, v;
    int64_t n = 0;
    while (p < e) {
        const uint8_t *at = p;
        if (rd_field(&p, e, &f, &wt, &len) < 0) goto malformed;
        if (f != 1) {
            if (skip_payload(&p, e, wt, len) < 0) goto malformed;
            continue;
        }
        if (kind == KIND_BYTES && wt == WT_LEN) {
            if (out && n < cap) {
                ((int64_t *)out)[2 * n] = p - base;
                ((int64_t *)out)[2 * n + 1] = (int64_t)len;
            }
            n++;
            p += len;
        } else if (kind == KIND_FLOAT && wt == WT_LEN) {
            if (len % 4) goto malformed;
            int64_t m = (int64_t)(len / 4);
            if (out && n < cap) {
                int64_t take = m < cap - n ? m : cap - n;
#if TPD_BIG_ENDIAN
                for (int64_t j = 0; j < take; j++) {
                    uint32_t w = ld32(p + 4 * j);
                    memcpy((float *)out + n + j, &w, 4);
                }
#else
                memcpy((float *)out + n, p, (size_t)take * 4);
#endif
            }
            n += m;
            p += len;
        } else if (kind == KIND_FLOAT && wt == WT_I32) {
            if (e - p < 4) goto malformed;
            if (out && n < cap) {
                uint32_t w = ld32(p);
                memcpy((float *)out + n, &w, 4);
            }
            n++;
            p += 4;
        } else if (kind == KIND_INT64 && wt == WT_LEN) {
            const uint8_t *q = p, *qe = p + len;
            while (q < qe) {
                if (rd_varint(&q, qe, &v) < 0) {
                    at = q;
                    goto malformed;
                }
                if (out && n < cap) ((int64_t *)out)[n] = (int64_t)v;
                n++;
            }
            p = qe;
        } else if (kind == KIND_INT64 && wt == WT_VARINT) {
            if (rd_varint(&p, e, &v) < 0) goto malformed;
            if (out && n < cap) ((int64_t *)out)[n] = (int64_t)v;
            n++;
        } else {
            goto malformed; /* value field with the wrong wire type */
        }
        continue;
    malformed:
        *bad = at;
        return E_MALFORMED;
    }
    *count = n;
    return E_OK;
}

/* decode(buf, locs, nkeys, fidx, kind, mode, n, out, aux[, bidx])
 *   -> (err, record, got_kind, got_count, bad_offset)
 * mode 0 (fixed): out holds count*n values; aux is uint8 present[count] (0 = missing/unset kind).
 * mode 1 (count): aux is int64 counts[count]; out is None.
 * mode 2 (fill):  out holds sum(counts) values; aux is the int64 counts from mode 1.
 * Bytes values are written as (offset, length) int64 pairs into the record's buffer. buf and
 * bidx: as for locate. */
static PyObject *py_decode(PyObject *self, PyObject *args) {
    Py_buffer locb, outb = {0}, auxb = {0};
    Py_ssize_t nkeys, fidx, n;
    int kind, mode;
    PyObject *bufo, *outo, *auxo, *bidxo = NULL;
    bufset_t bs = {0};
    if (!PyArg_ParseTuple(args, "Oy*nniinOO|O", &bufo, &locb, &nkeys, &fidx, &kind, &mode, &n,
                          &outo, &auxo, &bidxo))
        return NULL;
    PyObject *result = NULL;
    int have_out = 0, have_aux = 0, have_bs = 0;
    if (outo != Py_None) {
        if (get_wbuf(outo, &outb, "out") < 0) goto done;
        have_out = 1;
    }
    if (get_wbuf(auxo, &auxb, "aux") < 0) goto done;
    have_aux = 1;
    /* Every size below is checked in 64-bit arithmetic with overflow detection: n, nkeys and the
     * counts of mode 2 come from the caller and may be anything. */
    if (nkeys <= 0 || nkeys > PY_SSIZE_T_MAX / 16 || fidx < 0 || fidx >= nkeys ||
        locb.len % (nkeys * 16) || kind < 1 || kind > 3 || mode < 0 || mode > 2 || n < 0) {
        PyErr_SetString(PyExc_ValueError, "decode: bad arguments");
        goto done;
    }
    Py_ssize_t count = locb.len / (nkeys * 16);
    if (bufset_get(bufo, bidxo, count, &bs, "decode") < 0) goto done;
    have_bs = 1;
    Py_ssize_t vsize = kind == KIND_FLOAT ? 4 : kind == KIND_INT64 ? 8 : 16;
    Py_ssize_t need;
    if (mode == 0 && (!have_out || __builtin_mul_overflow(count, n, &need) ||
                      __builtin_mul_overflow(need, vsize, &need) || outb.len < need ||
                      auxb.len < count)) {
        PyErr_SetString(PyExc_ValueError, "decode: output arrays too small");
        goto done;
    }
    if (mode >= 1 && auxb.len / 8 < count) {
        PyErr_SetString(PyExc_ValueError, "decode: counts array too small");
        goto done;
    }
    int64_t *counts = (int64_t *)auxb.buf;
    int64_t room = 0; /* mode 2: values out holds */
    if (mode == 2) {
        int64_t total = 0;
        for (Py_ssize_t r = 0; r < count; r++) {
            if (counts[r] < 0 || __builtin_add_overflow(total, counts[r], &total)) {
                PyErr_Format(PyExc_ValueError,
                             "decode: counts[%zd] = %lld: the counts must be those of a count pass "
                             "(mode 1), not negative and with a sum that fits in int64",
                             r, (long long)counts[r]);
                goto done;
            }
        }
        room = have_out ? outb.len / vsize : 0;
        if (!have_out || total > room) {
            PyErr_SetString(PyExc_ValueError, "decode: output array too small");
            goto done;
        }
    }
    const int64_t *locs = (const int64_t *)locb.buf;
    uint8_t *out = have_out ? (uint8_t *)outb.buf : NULL;
    int err = E_OK, got_kind = 0;
    int64_t got_count = 0, pos = 0;
    Py_ssize_t bad_rec = -1, bad_off = -1;
    Py_BEGIN_ALLOW_THREADS for (Py_ssize_t r = 0; r < count; r++) {
        int64_t off = locs[(r * nkeys + fidx) * 2], len = locs[(r * nkeys + fidx) * 2 + 1];
        const Py_buffer *b = bufset_at(&bs, r);
        const uint8_t *base = (const uint8_t *)b->buf;
        int k = KIND_NONE;
        const uint8_t *lp = NULL, *le = NULL, *bad = NULL;
        int64_t c = 0;
        if (off >= 0 && (len < 0 || off > b->len || len > b->len - off)) {
            err = E_MALFORMED;
            bad_off = off;
            bad_rec = r;
            break;
        }
        if (off >= 0) {
            err = feature_list(base + off, base + off + len, &k, &lp, &le, &bad);
            if (err) {
                bad_rec = r;
                bad_off = bad - base;
                break;
            }
        }
        if (k == KIND_NONE) { /* missing, or a Feature with no list set */
            if (mode == 0)
                ((uint8_t *)auxb.buf)[r] = 0;
            else if (mode == 1)
                counts[r] = 0;
            continue;
        }
        if (k != kind) {
            err = E_KIND;
            got_kind = k;
            bad_rec = r;
            break;
        }
        void *dst = NULL;
        int64_t cap = 0;
        if (mode == 0) {
            dst = out + r * n * vsize;
            cap = n;
        } else if (mode == 2) {
            dst = out + pos * vsize;
            cap = counts[r];
            if (cap < 0 || cap > room - pos) { /* counts changed since they were checked */
                err = E_COUNT;
                got_count = cap;
                bad_rec = r;
                break;
            }
        }
        err = list_values(base, lp, le, kind, dst, cap, &c, &bad);
        if (err) {
            bad_rec = r;
            bad_off = bad - base;
            break;
        }
        if (mode == 0) {
            if (c != n) {
                err = E_COUNT;
                got_count = c;
                bad_rec = r;
                break;
            }
            ((uint8_t *)auxb.buf)[r] = 1;
        } else if (mode == 1) {
            counts[r] = c;
        } else {
            if (c != cap) { /* cannot happen unless the buffer changed between passes */
                err = E_COUNT;
                got_count = c;
                bad_rec = r;
                break;
            }
            pos += c;
        }
    }
    Py_END_ALLOW_THREADS result =
        Py_BuildValue("inLLn", err, bad_rec, (long long)got_kind, (long long)got_count, bad_off);
done:
    if (have_bs) bufset_release(&bs);
    PyBuffer_Release(&locb);
    if (have_out) PyBuffer_Release(&outb);
    if (have_aux) PyBuffer_Release(&auxb);
    return result;
}
