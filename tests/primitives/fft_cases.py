"""Cases for the discrete Fourier transforms, shared by the forward, JVP and transpose suites:
every kind, real and complex and single-precision operands, odd and even lengths, padding and
truncation by ``n``/``s``, one and several (negative, reordered, repeated) axes, every norm."""

from __future__ import annotations

import numpy as np

from tests.primitives.cases import Case

fft = np.fft

CASES = [
    Case("fft-complex", lambda z: (fft.fft(z), fft.fft(z, n=7, axis=0), fft.fft(z, n=2, norm="ortho"),
                                   fft.ifft(z, axis=-2, norm="forward"), fft.ifft(z, n=6)), ((4, 5),), "complex128"),
    Case("fft-real-promoted", lambda x: (fft.fft(x), fft.ifft(x, n=8, norm="ortho")), ((5,),)),
    Case("fft-f32", lambda x: (fft.fft(x, axis=0), fft.rfft(x), fft.irfft(fft.rfft(x), n=4, norm="ortho")),
         ((3, 4),), "float32"),
    Case("fft-c64", lambda z: (fft.fft(z, n=5), fft.ifftn(z, norm="forward"), fft.irfft(z)), ((3, 4),), "complex64"),
    Case("rfft", lambda x: (fft.rfft(x), fft.rfft(x, n=8), fft.rfft(x, n=3, axis=0, norm="ortho"),
                            fft.rfft(x, n=4, norm="forward"), fft.rfft(x, axis=0)), ((5, 6),)),
    Case("irfft", lambda z: (fft.irfft(z), fft.irfft(z, n=7), fft.irfft(z, n=4, axis=0, norm="ortho"),
                             fft.irfft(z, n=12, norm="forward"), fft.irfft(z, n=1)), ((4, 5),), "complex128"),
    Case("irfft-real-promoted", lambda x: fft.irfft(x, n=5), ((2, 4),)),
    Case("hfft-ihfft", lambda z: (fft.hfft(z), fft.hfft(z, n=5, axis=0, norm="ortho"),
                                  fft.ihfft(z.real, norm="forward"), fft.ihfft(z.imag, n=7)), ((4, 3),), "complex128"),
    Case("fftn", lambda z: (fft.fftn(z), fft.fftn(z, s=(3, 5), axes=(0, -1)), fft.ifft2(z, s=(2, 2)),
                            fft.ifftn(z, axes=(2, 0), norm="ortho"), fft.fft2(z, axes=(0, 1), norm="forward"),
                            fft.fftn(z, axes=(1, 1)), fft.fftn(z, s=(4, 5), axes=(0, 0))),
         ((2, 3, 4),), "complex128"),
    Case("rfftn-irfftn", lambda x: (fft.rfftn(x), fft.rfft2(x, s=(3, 5)), fft.rfftn(x, axes=(2, 0), norm="ortho"),
                                    fft.irfftn(fft.rfftn(x), s=x.shape, axes=(0, 1, 2)),
                                    fft.irfft2(fft.rfft2(x)), fft.irfftn(fft.fftn(x), s=(3, 5), axes=(0, 2)),
                                    fft.rfftn(x, axes=(2, 2)), fft.irfftn(fft.fftn(x), axes=(1, 1), norm="forward")),
         ((2, 3, 4),)),
    Case("fftshift", lambda x: (fft.fftshift(x), fft.ifftshift(x), fft.fftshift(x, axes=1),
                                fft.ifftshift(x, axes=(0,)), fft.fftshift(x, axes=(0, 0))), ((4, 5),)),
    Case("fftfreq", lambda x: x * fft.fftfreq(5, d=0.1) + fft.rfftfreq(8)[:5], ((5,),)),
]

_NORMS = (None, "backward", "ortho", "forward")

LINEAR_CASES = []
for _norm in _NORMS:
    _tag = _norm or "default"
    LINEAR_CASES += [
        Case(f"fft-{_tag}", lambda z, nm=_norm: (fft.fft(z, norm=nm), fft.fft(z, n=7, axis=0, norm=nm),
                                                 fft.fft(z, n=3, norm=nm)), ((4, 5),), "complex128"),
        Case(f"ifft-{_tag}", lambda z, nm=_norm: (fft.ifft(z, norm=nm), fft.ifft(z, n=2, axis=0, norm=nm),
                                                  fft.ifft(z, n=8, norm=nm)), ((4, 5),), "complex128"),
        Case(f"fft-real-{_tag}", lambda x, nm=_norm: (fft.fft(x, n=6, norm=nm), fft.ifft(x, axis=0, norm=nm)),
             ((4, 5),)),
        Case(f"rfft-{_tag}", lambda x, nm=_norm: (fft.rfft(x, norm=nm), fft.rfft(x, n=8, axis=0, norm=nm),
                                                  fft.rfft(x, n=3, norm=nm), fft.rfft(x, n=6, axis=0, norm=nm),
                                                  fft.rfft(x, n=2, norm=nm)), ((4, 5),)),
        Case(f"irfft-{_tag}", lambda z, nm=_norm: (fft.irfft(z, norm=nm), fft.irfft(z, n=7, norm=nm),
                                                   fft.irfft(z, n=3, axis=0, norm=nm), fft.irfft(z, n=12, norm=nm),
                                                   fft.irfft(z, n=2, norm=nm), fft.irfft(z, n=1, norm=nm)),
             ((4, 5),), "complex128"),
        Case(f"fftn-{_tag}", lambda z, nm=_norm: (fft.fftn(z, s=(3, 6), axes=(1, 0), norm=nm),
                                                  fft.ifft2(z, norm=nm), fft.fftn(z, axes=(2, 2), norm=nm)),
             ((2, 4, 5),), "complex128"),
        Case(f"rfftn-irfftn-{_tag}", lambda x, nm=_norm: (fft.rfftn(x, s=(5, 3), axes=(0, 2), norm=nm),
                                                          fft.rfftn(x, axes=(2, 0), norm=nm),
                                                          fft.irfftn(x.astype(complex), s=(3, 4), axes=(1, 2), norm=nm),
                                                          fft.irfft2(x * 1j, norm=nm)), ((2, 4, 5),)),
    ]
LINEAR_CASES += [
    Case("irfft-real-input", lambda x: fft.irfft(x, n=6), ((3, 4),)),
    Case("irfftn-complex", lambda z: fft.irfftn(z, s=(5, 6), axes=(0, 1), norm="ortho"), ((3, 4),), "complex128"),
    Case("hfft-ihfft", lambda z: (fft.hfft(z, n=5), fft.ihfft(z.real, norm="ortho")), ((3, 4),), "complex128"),
    Case("fftshift", lambda z: (fft.fftshift(z), fft.ifftshift(z, axes=0)), ((4, 5),), "complex128"),
    Case("fft-c64", lambda z: (fft.fft(z, n=3), fft.irfft(z, n=5, norm="ortho")), ((4, 3),), "complex64"),
    Case("rfft-f32", lambda x: fft.rfftn(x, s=(3, 5), axes=(0, 1), norm="forward"), ((4, 3),), "float32"),
]
