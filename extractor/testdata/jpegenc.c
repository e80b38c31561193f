/* jpegenc writes JPEG kinds Pillow 9.4's encoder cannot make, for
 * extractor's bit-exactness test (jpeg_test.go compiles it with cgo's C
 * compiler against the same libjpeg.a):
 *
 *   jpegenc OUT.jpg WIDTH HEIGHT [cs=ycck|cmyk|rgb|ycbcr|gray] [sample=HxV,HxV,...]
 *           [restart=MCUS] [restartrows=ROWS] [progressive] [arith] [q=QUALITY]
 *
 * The pixels are a fixed pattern of gradients, edges and noise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

static unsigned char pattern(int x, int y, int c, unsigned *seed) {
	int v;
	*seed = *seed * 1103515245u + 12345u;
	switch (c) {
	case 0: v = (x * 255) / 97 % 256; break;
	case 1: v = (y * 255) / 61 % 256; break;
	case 2: v = ((x / 7 + y / 5) % 2) ? 220 : 30; break;
	default: v = (x + 2 * y) % 256; break;
	}
	v += (int)((*seed >> 16) % 41) - 20;
	return (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
}

int main(int argc, char **argv) {
	struct jpeg_compress_struct cinfo;
	struct jpeg_error_mgr jerr;
	const char *cs = "ycbcr", *sample = NULL;
	int restart = 0, restartrows = 0, progressive = 0, arith = 0, q = 90;
	int w, h, comps, i;
	unsigned seed = 1;
	FILE *f;
	unsigned char *row;

	if (argc < 4) {
		fprintf(stderr, "usage: jpegenc OUT W H [options]\n");
		return 2;
	}
	w = atoi(argv[2]);
	h = atoi(argv[3]);
	for (i = 4; i < argc; i++) {
		if (!strncmp(argv[i], "cs=", 3)) cs = argv[i] + 3;
		else if (!strncmp(argv[i], "sample=", 7)) sample = argv[i] + 7;
		else if (!strncmp(argv[i], "restart=", 8)) restart = atoi(argv[i] + 8);
		else if (!strncmp(argv[i], "restartrows=", 12)) restartrows = atoi(argv[i] + 12);
		else if (!strcmp(argv[i], "progressive")) progressive = 1;
		else if (!strcmp(argv[i], "arith")) arith = 1;
		else if (!strncmp(argv[i], "q=", 2)) q = atoi(argv[i] + 2);
		else {
			fprintf(stderr, "jpegenc: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	f = fopen(argv[1], "wb");
	if (f == NULL) {
		perror(argv[1]);
		return 1;
	}
	cinfo.err = jpeg_std_error(&jerr);
	jpeg_create_compress(&cinfo);
	jpeg_stdio_dest(&cinfo, f);
	cinfo.image_width = (JDIMENSION)w;
	cinfo.image_height = (JDIMENSION)h;
	if (!strcmp(cs, "gray")) {
		comps = 1;
		cinfo.in_color_space = JCS_GRAYSCALE;
	} else if (!strcmp(cs, "cmyk") || !strcmp(cs, "ycck")) {
		comps = 4;
		cinfo.in_color_space = JCS_CMYK;
	} else {
		comps = 3;
		cinfo.in_color_space = JCS_RGB;
	}
	cinfo.input_components = comps;
	jpeg_set_defaults(&cinfo);
	if (!strcmp(cs, "ycck"))
		jpeg_set_colorspace(&cinfo, JCS_YCCK);
	else if (!strcmp(cs, "rgb"))
		jpeg_set_colorspace(&cinfo, JCS_RGB);
	jpeg_set_quality(&cinfo, q, TRUE);
	if (sample != NULL) {
		const char *p = sample;
		for (i = 0; i < cinfo.num_components && *p; i++) {
			int hs, vs, n;
			if (sscanf(p, "%dx%d%n", &hs, &vs, &n) != 2) {
				fprintf(stderr, "jpegenc: bad sample=%s\n", sample);
				return 2;
			}
			cinfo.comp_info[i].h_samp_factor = hs;
			cinfo.comp_info[i].v_samp_factor = vs;
			p += n;
			if (*p == ',')
				p++;
		}
	}
	cinfo.restart_interval = (unsigned)restart;
	cinfo.restart_in_rows = restartrows;
	cinfo.arith_code = arith ? TRUE : FALSE;
	if (progressive)
		jpeg_simple_progression(&cinfo);
	jpeg_start_compress(&cinfo, TRUE);
	row = malloc((size_t)w * (size_t)comps);
	while (cinfo.next_scanline < cinfo.image_height) {
		int y = (int)cinfo.next_scanline;
		for (int x = 0; x < w; x++)
			for (int c = 0; c < comps; c++)
				row[x * comps + c] = pattern(x, y, c, &seed);
		jpeg_write_scanlines(&cinfo, &row, 1);
	}
	jpeg_finish_compress(&cinfo);
	jpeg_destroy_compress(&cinfo);
	free(row);
	return fclose(f) == 0 ? 0 : 1;
}
