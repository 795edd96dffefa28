// relay-test-make-tiff OUT IN... — writes the images IN... as the pages of one multi-page TIFF
// (Leptonica, as the OCR model reads it): test input for per-page progress.
#include <leptonica/allheaders.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s OUT.tif IN...\n", argv[0]);
    return 2;
  }
  Pixa* pages = pixaCreate(argc - 2);
  for (int i = 2; i < argc; ++i) {
    Pix* pix = pixRead(argv[i]);
    if (!pix) {
      std::fprintf(stderr, "cannot read %s\n", argv[i]);
      return 1;
    }
    pixaAddPix(pages, pix, L_INSERT);
  }
  const int failed = pixaWriteMultipageTiff(argv[1], pages);
  pixaDestroy(&pages);
  return failed ? 1 : 0;
}
