/* JPEG decoding through libjpeg-turbo (linked statically), configured as
 * Pillow 9.4's JPEG decoder configures it, so that the pixels equal
 * PIL's Image.open(f).convert("RGB") byte for byte:
 *
 *   - libjpeg's defaults otherwise: ISLOW DCT, fancy upsampling, block
 *     smoothing; jpeg_color_space is libjpeg's own guess (Pillow's
 *     "jpegmode" is empty), out_color_space is JCS_GRAYSCALE, JCS_RGB or
 *     JCS_CMYK for 1, 3 or 4 components (Pillow's modes L, RGB and CMYK;
 *     any other count is an error, as in Pillow's SOF handler);
 *   - a suspending source fed as Pillow's ImageFile.load feeds it: 64 KiB
 *     (MAXBLOCK) more of the file after each suspension, the unconsumed
 *     bytes kept. Suspending with the whole file given is an error ("image
 *     file is truncated") unless every row was already read (Pillow
 *     ignores a failing jpeg_finish_decompress then). libjpeg's arithmetic
 *     decoder cannot suspend: where its data crosses a 64 KiB boundary it
 *     fails in Pillow ("broken data stream") and fails here too;
 *   - warnings are dropped (Pillow's output_message does nothing);
 *   - CMYK is read as Adobe-inverted ("CMYK;I") and converted with Pillow's
 *     cmyk2rgb; gray is replicated (l2rgb);
 *   - a scale of 1/2, 1/4 or 1/8 (--fast-decode) sets scale_num = 1 and
 *     scale_denom as Pillow's draft() makes its decoder do, nothing else
 *     (ISLOW and fancy upsampling stay), so a scaled decode equals PIL's
 *     Image.draft("RGB", ...) + convert("RGB") byte for byte too.
 *
 * libjpeg's error exits longjmp to a setjmp inside the same C function
 * that called libjpeg, never across Go frames.
 *
 * Memory: this file is libjpeg's system-dependent memory manager
 * (jmemsys.h: jpeg_get_small ... jpeg_mem_term, replacing jmemnobs.c,
 * which the linker then leaves out of libjpeg.a). Small objects come from
 * malloc; large ones (a progressive image's whole-image coefficient
 * buffer: 36 MB for a 4000x3000 4:2:0 photo) from the caller's arena when
 * they fit, else malloc. Each fresh malloc of that size is a fresh mmap
 * (extractor/memtrim.go fixes glibc's mmap threshold at 1 MiB) whose
 * page faults cost as much as decoding the image; the arena is reused
 * from one decode to the next. */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include "jpegdec.h"

/* ff_arena is the memory jpeg_get_large serves from during one decode:
 * base[0:cap) (may be empty), bump-allocated; need ends as the bytes it
 * would have taken to serve every large request from it. */
typedef struct {
	unsigned char *base;
	size_t cap, need;
} ff_arena;

typedef struct {
	struct jpeg_decompress_struct cinfo; /* first: the callbacks cast back */
	struct jpeg_error_mgr err;
	struct jpeg_source_mgr src;
	struct jpeg_progress_mgr progress;
	jmp_buf jump;
	int too_many_scans;
	const unsigned char *data;
	size_t len;
	size_t window_end; /* the bytes given to libjpeg so far: data[0:window_end) */
	size_t skip;       /* bytes still to skip when more data is given */
	ff_arena arena;    /* jpeg_get_large's, via cinfo.client_data */
} ff_ctx;

/* Pillow's ImageFile.MAXBLOCK: the bytes ImageFile.load reads per call of
 * the decoder. */
#define FF_PIL_BLOCK 65536

static void ff_error_exit(j_common_ptr cinfo) { longjmp(((ff_ctx *)cinfo)->jump, 1); }

static void ff_output_message(j_common_ptr cinfo) { (void)cinfo; }

static void ff_init_source(j_decompress_ptr cinfo) { (void)cinfo; }

static void ff_term_source(j_decompress_ptr cinfo) { (void)cinfo; }

/* All the data is in the buffer from the start: asking for more suspends. */
static boolean ff_fill_input_buffer(j_decompress_ptr cinfo) {
	(void)cinfo;
	return FALSE;
}

/* Pillow's skip_input_data: skipping past the data given so far suspends
 * and skips the rest when more is given. */
static void ff_skip_input_data(j_decompress_ptr cinfo, long n) {
	ff_ctx *c = (ff_ctx *)cinfo;
	struct jpeg_source_mgr *s = cinfo->src;
	if (n <= 0)
		return;
	if ((size_t)n > s->bytes_in_buffer) {
		c->skip = (size_t)n - s->bytes_in_buffer;
		s->next_input_byte += s->bytes_in_buffer;
		s->bytes_in_buffer = 0;
		return;
	}
	s->next_input_byte += n;
	s->bytes_in_buffer -= (size_t)n;
	c->skip = 0;
}

/* ff_more gives libjpeg the file's next 64 KiB after a suspension, as
 * Pillow's next decoder call does; 0 when the whole file was given
 * (Pillow: "image file is truncated"). */
static int ff_more(ff_ctx *c) {
	size_t pos, avail;
	if (c->window_end >= c->len)
		return 0;
	c->window_end = c->len - c->window_end > FF_PIL_BLOCK ? c->window_end + FF_PIL_BLOCK : c->len;
	pos = (size_t)(c->src.next_input_byte - c->data);
	avail = c->window_end - pos;
	if (c->skip > 0) {
		size_t n = c->skip < avail ? c->skip : avail;
		c->src.next_input_byte += n;
		avail -= n;
		c->skip -= n;
	}
	c->src.bytes_in_buffer = avail;
	return 1;
}

static void ff_progress(j_common_ptr cinfo) {
	ff_ctx *c = (ff_ctx *)cinfo;
	if (c->cinfo.input_scan_number > FF_JPEG_MAX_SCANS) {
		c->too_many_scans = 1;
		longjmp(c->jump, 1);
	}
}

/* libjpeg's memory manager hooks (jmemsys.h), as jmemnobs.c has them but
 * for jpeg_get_large's arena (cinfo->client_data, NULL for none). */

void *jpeg_get_small(j_common_ptr cinfo, size_t sizeofobject) {
	(void)cinfo;
	return malloc(sizeofobject);
}

void jpeg_free_small(j_common_ptr cinfo, void *object, size_t sizeofobject) {
	(void)cinfo;
	(void)sizeofobject;
	free(object);
}

void *jpeg_get_large(j_common_ptr cinfo, size_t sizeofobject) {
	ff_arena *a = (ff_arena *)cinfo->client_data;
	size_t start;
	if (a == NULL)
		return malloc(sizeofobject);
	start = (a->need + 63) & ~(size_t)63;
	a->need = start + sizeofobject;
	if (a->base != NULL && a->need <= a->cap)
		return a->base + start;
	return malloc(sizeofobject);
}

void jpeg_free_large(j_common_ptr cinfo, void *object, size_t sizeofobject) {
	ff_arena *a = (ff_arena *)cinfo->client_data;
	unsigned char *p = object;
	(void)sizeofobject;
	if (a != NULL && a->base != NULL && p >= a->base && p < a->base + a->cap)
		return; /* the arena is the caller's */
	free(object);
}

size_t jpeg_mem_available(j_common_ptr cinfo, size_t min_bytes_needed, size_t max_bytes_needed,
                          size_t already_allocated) {
	(void)min_bytes_needed;
	if (cinfo->mem->max_memory_to_use) {
		if ((size_t)cinfo->mem->max_memory_to_use > already_allocated)
			return cinfo->mem->max_memory_to_use - already_allocated;
		return 0;
	}
	return max_bytes_needed;
}

/* info is a backing_store_ptr (jmemsys.h is not installed): never used,
 * since jpeg_mem_available grants all the memory asked for. */
void jpeg_open_backing_store(j_common_ptr cinfo, void *info, long total_bytes_needed) {
	(void)info;
	(void)total_bytes_needed;
	ERREXIT(cinfo, JERR_NO_BACKING_STORE);
}

long jpeg_mem_init(j_common_ptr cinfo) {
	(void)cinfo;
	return 0;
}

void jpeg_mem_term(j_common_ptr cinfo) { (void)cinfo; }

/* ff_new returns a context whose error manager is ready and whose large
 * allocations come from arena[0:cap) while they fit (arena NULL: malloc
 * only); the caller calls setjmp, then ff_start. */
static ff_ctx *ff_new(unsigned char *arena, size_t cap) {
	ff_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return NULL;
	c->arena.base = arena;
	c->arena.cap = arena == NULL ? 0 : cap;
	c->cinfo.client_data = &c->arena; /* kept by jpeg_create_decompress */
	c->cinfo.err = jpeg_std_error(&c->err);
	c->err.error_exit = ff_error_exit;
	c->err.output_message = ff_output_message;
	return c;
}

/* ff_start creates the decompressor over data and reads the header, as
 * Pillow does: jpeg_read_header(FALSE) until an image, not tables only. */
static int ff_start(ff_ctx *c, const unsigned char *data, size_t len, ff_jpeg_info *info) {
	int ok;
	jpeg_create_decompress(&c->cinfo);
	c->src.init_source = ff_init_source;
	c->src.fill_input_buffer = ff_fill_input_buffer;
	c->src.skip_input_data = ff_skip_input_data;
	c->src.resync_to_restart = jpeg_resync_to_restart;
	c->src.term_source = ff_term_source;
	c->data = data;
	c->len = len;
	c->window_end = len > FF_PIL_BLOCK ? FF_PIL_BLOCK : len;
	c->src.next_input_byte = data;
	c->src.bytes_in_buffer = c->window_end;
	c->cinfo.src = &c->src;
	c->progress.progress_monitor = ff_progress;
	c->cinfo.progress = &c->progress;
	for (;;) {
		ok = jpeg_read_header(&c->cinfo, FALSE);
		if (ok == JPEG_HEADER_TABLES_ONLY)
			continue;
		if (ok != JPEG_SUSPENDED)
			break;
		if (!ff_more(c)) {
			snprintf(info->msg, sizeof info->msg, "image file is truncated (in the header)");
			return FF_JPEG_TRUNCATED;
		}
	}
	info->width = (int)c->cinfo.image_width;
	info->height = (int)c->cinfo.image_height;
	info->components = c->cinfo.num_components;
	info->color_space = (int)c->cinfo.jpeg_color_space;
	if (info->components != 1 && info->components != 3 && info->components != 4) {
		snprintf(info->msg, sizeof info->msg, "cannot handle %d-layer images", info->components);
		return FF_JPEG_UNSUPPORTED;
	}
	return FF_JPEG_OK;
}

/* ff_failed turns a longjmp from libjpeg into a result. */
static int ff_failed(ff_ctx *c, ff_jpeg_info *info) {
	int ret = FF_JPEG_ERROR;
	if (c->too_many_scans) {
		snprintf(info->msg, sizeof info->msg, "more than %d scans", FF_JPEG_MAX_SCANS);
		ret = FF_JPEG_UNSUPPORTED;
	} else {
		c->err.format_message((j_common_ptr)&c->cinfo, info->msg);
	}
	jpeg_destroy_decompress(&c->cinfo);
	free(c);
	return ret;
}

int ff_jpeg_header(const unsigned char *data, size_t len, ff_jpeg_info *info) {
	int ret;
	ff_ctx *c = ff_new(NULL, 0);
	if (c == NULL) {
		snprintf(info->msg, sizeof info->msg, "out of memory");
		return FF_JPEG_ERROR;
	}
	if (setjmp(c->jump))
		return ff_failed(c, info);
	ret = ff_start(c, data, len, info);
	jpeg_destroy_decompress(&c->cinfo);
	free(c);
	return ret;
}

/* Pillow's MULDIV255. */
static inline unsigned muldiv255(unsigned a, unsigned b) {
	unsigned t = a * b + 128;
	return ((t >> 8) + t) >> 8;
}

/* cmyk_rgb is Pillow's unpacker for "CMYK;I" (every byte inverted)
 * followed by its cmyk2rgb. */
static void cmyk_rgb(const JSAMPLE *in, unsigned char *out, int w) {
	for (int x = 0; x < w; x++, in += 4, out += 3) {
		unsigned c = 255u - in[0], m = 255u - in[1], y = 255u - in[2], k = 255u - in[3];
		unsigned nk = 255u - k;
		out[0] = (unsigned char)(nk - muldiv255(c, nk));
		out[1] = (unsigned char)(nk - muldiv255(m, nk));
		out[2] = (unsigned char)(nk - muldiv255(y, nk));
	}
}

static void gray_rgb(const JSAMPLE *in, unsigned char *out, int w) {
	for (int x = 0; x < w; x++, out += 3)
		out[0] = out[1] = out[2] = in[x];
}

int ff_jpeg_decode(const unsigned char *data, size_t len, int scale_denom, unsigned char *out, size_t out_len,
                   int y0, int rows, unsigned char *arena, size_t arena_len, size_t *arena_need,
                   ff_jpeg_info *info) {
	int ret, ow, oh;
	JSAMPARRAY buf;
	ff_ctx *c;
	size_t need;
	if (scale_denom != 1 && scale_denom != 2 && scale_denom != 4 && scale_denom != 8) {
		snprintf(info->msg, sizeof info->msg, "scale 1/%d: want 1/1, 1/2, 1/4 or 1/8", scale_denom);
		return FF_JPEG_BADARGS;
	}
	if (arena_need != NULL)
		*arena_need = 0;
	c = ff_new(arena, arena_len);
	if (c == NULL) {
		snprintf(info->msg, sizeof info->msg, "out of memory");
		return FF_JPEG_ERROR;
	}
	if (setjmp(c->jump)) {
		need = c->arena.need;
		ret = ff_failed(c, info);
		if (arena_need != NULL)
			*arena_need = need;
		return ret;
	}
	ret = ff_start(c, data, len, info);
	if (ret != FF_JPEG_OK)
		goto done;
	/* Pillow's draft(): scale_num 1, scale_denom the scale; libjpeg's
	 * output size is then ceil(size / scale_denom) (jdiv_round_up). */
	ow = (int)(((long)info->width + scale_denom - 1) / scale_denom);
	oh = (int)(((long)info->height + scale_denom - 1) / scale_denom);
	info->out_width = ow;
	info->out_height = oh;
	if (y0 < 0 || rows < 0 || y0 + rows > oh || out_len < (size_t)3 * (size_t)ow * (size_t)rows) {
		snprintf(info->msg, sizeof info->msg, "rows [%d, %d) of a %dx%d image do not fit %zu bytes", y0, y0 + rows,
		         ow, oh, out_len);
		ret = FF_JPEG_BADARGS;
		goto done;
	}
	c->cinfo.out_color_space = info->components == 1 ? JCS_GRAYSCALE : info->components == 3 ? JCS_RGB : JCS_CMYK;
	if (scale_denom > 1) {
		c->cinfo.scale_num = 1;
		c->cinfo.scale_denom = (unsigned int)scale_denom;
	}
	while (!jpeg_start_decompress(&c->cinfo)) {
		if (!ff_more(c)) {
			snprintf(info->msg, sizeof info->msg, "image file is truncated (before the first row)");
			ret = FF_JPEG_TRUNCATED;
			goto done;
		}
	}
	if ((int)c->cinfo.output_width != ow || (int)c->cinfo.output_height != oh ||
	    c->cinfo.output_components != info->components) {
		snprintf(info->msg, sizeof info->msg,
		         "decoder output is %ux%u with %d components, want %dx%d (1/%d of %dx%d) with %d",
		         c->cinfo.output_width, c->cinfo.output_height, c->cinfo.output_components, ow, oh, scale_denom,
		         info->width, info->height, info->components);
		ret = FF_JPEG_UNSUPPORTED;
		goto done;
	}
	/* One row in the decoder's own format: rows not kept, gray and CMYK. */
	buf = c->cinfo.mem->alloc_sarray((j_common_ptr)&c->cinfo, JPOOL_IMAGE,
	                                 (JDIMENSION)ow * (JDIMENSION)info->components, 1);
	while ((int)c->cinfo.output_scanline < oh) {
		int y = (int)c->cinfo.output_scanline;
		unsigned char *dst = NULL;
		JSAMPROW row = buf[0];
		if (y >= y0 && y < y0 + rows) {
			dst = out + (size_t)(y - y0) * 3 * (size_t)ow;
			if (info->components == 3)
				row = dst;
		}
		while (jpeg_read_scanlines(&c->cinfo, &row, 1) != 1) {
			if (!ff_more(c)) {
				snprintf(info->msg, sizeof info->msg, "image file is truncated (at row %d of %d)", y, oh);
				ret = FF_JPEG_TRUNCATED;
				goto done;
			}
		}
		if (dst != NULL && info->components == 1)
			gray_rgb(row, dst, ow);
		else if (dst != NULL && info->components == 4)
			cmyk_rgb(row, dst, ow);
	}
	/* Every row is out: Pillow ignores a suspension here (a missing EOI). */
	(void)jpeg_finish_decompress(&c->cinfo);
done:
	jpeg_destroy_decompress(&c->cinfo);
	if (arena_need != NULL)
		*arena_need = c->arena.need;
	free(c);
	return ret;
}
