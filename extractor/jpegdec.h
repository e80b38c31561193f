/* JPEG decoding through libjpeg-turbo, configured as Pillow 9.4's JPEG
 * decoder (src/libImaging/JpegDecode.c) configures it. See jpegdec.c. */
#ifndef FEATUREFS_JPEGDEC_H
#define FEATUREFS_JPEGDEC_H

#include <stddef.h>

/* Results of ff_jpeg_header and ff_jpeg_decode. */
enum {
	FF_JPEG_OK = 0,
	FF_JPEG_ERROR = 1,       /* libjpeg refused the data: msg says why */
	FF_JPEG_TRUNCATED = 2,   /* the data ended before the image did */
	FF_JPEG_UNSUPPORTED = 3, /* a JPEG Pillow does not open: msg says why */
	FF_JPEG_BADARGS = 4      /* the caller's buffer or rows do not fit */
};

/* The most scans a progressive JPEG may have (libjpeg-turbo's tools use
 * 500 against scan-count denial of service; encoders write about 10). */
#define FF_JPEG_MAX_SCANS 1000

typedef struct {
	int width, height;
	int components; /* 1 (Pillow mode L), 3 (RGB) or 4 (CMYK) */
	int color_space; /* libjpeg's jpeg_color_space guess (J_COLOR_SPACE) */
	int out_width, out_height; /* ff_jpeg_decode: the decoded (scaled) size */
	char msg[200];   /* JMSG_LENGTH_MAX */
} ff_jpeg_info;

/* ff_jpeg_header reads the markers up to the first scan. */
int ff_jpeg_header(const unsigned char *data, size_t len, ff_jpeg_info *info);

/* ff_jpeg_decode decodes the whole image at 1/scale_denom of its size
 * (1, 2, 4 or 8: libjpeg's DCT-domain scaling, as Pillow's draft() asks
 * for it; 1 is the exact decode) and writes rows [y0, y0+rows) of the
 * decoded image as 8-bit RGB, 3*out_width bytes per row, into out (out_len
 * bytes). The decoded image is ceil(width/scale_denom) x
 * ceil(height/scale_denom) (info->out_width, out_height). Rows outside the
 * range are decoded (so corruption anywhere is found) but not kept.
 * libjpeg's large allocations come from arena[0:arena_len) (NULL: none)
 * while they fit, then from malloc; *arena_need (if not NULL) receives the
 * arena size that would have served them all. */
int ff_jpeg_decode(const unsigned char *data, size_t len, int scale_denom, unsigned char *out, size_t out_len,
                   int y0, int rows, unsigned char *arena, size_t arena_len, size_t *arena_need,
                   ff_jpeg_info *info);

#endif
