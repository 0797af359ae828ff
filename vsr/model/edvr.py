"""EDVR (Wang et al., CVPRW 2019) with BasicSR's exact ``state_dict`` layout.

Data flow: frames ``(N, T, 3, H, W)`` -> per-frame features (L1, L2, L3 pyramid) -> PCD alignment of
every frame to the centre frame -> TSA fusion (or a 1x1 conv) -> residual reconstruction ->
two x2 PixelShuffle stages -> HR residual, added to the bilinear x4 upsampling of the centre frame.

Unlike BasicSR, PCD alignment runs once on a batch of ``N*T`` frames instead of a Python loop over T.
The arithmetic and the weights are identical; the exported graph has 4 DCN nodes instead of ``4*T``.

How EDVR writes the tensors it assembles from others -- each window's centre features repeated, the aligned
frames side by side, TSA's weighted frames -- and in what precision TSA sums its correlation is its
:class:`Assembly`, BasicSR's own unless a runtime sets another (:meth:`EDVR.set_assembly`): the CUDA runtime's
channels-last segments and its half-precision models.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from vsr.model.dcn import DCNv2Pack


@dataclass(frozen=True)
class Assembly:
    """``channels_last``: the assembled tensors are written ``(N, H, W, C)``-ordered (torch's channels-last
    memory format; the values and logical shapes are the same), so that a channels-last runtime never copies them
    back.  ``attention_sum_fp32``: TSA's correlation -- a sum of ``num_feat`` products of unbounded features,
    which overflows fp16's 65504 -- is summed in fp32, one frame at a time, in a model otherwise in half
    precision (its embedding convolutions stay in the model's dtype)."""

    channels_last: bool = False
    attention_sum_fp32: bool = False


def _empty_like_layout(shape, like: torch.Tensor, dtype: torch.dtype, channels_last: bool) -> torch.Tensor:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    return torch.empty(shape, dtype=dtype, device=like.device, memory_format=fmt)


def _lrelu(x: torch.Tensor) -> torch.Tensor:
    return F.leaky_relu(x, 0.1)


class ResidualBlockNoBN(nn.Module):
    """``x + conv2(relu(conv1(x)))``; ``(N, C, H, W)`` -> same."""

    def __init__(self, num_feat: int):
        super().__init__()
        self.conv1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv2(F.relu(self.conv1(x)))


class PixelShuffleLReLU(nn.Module):
    """``leaky_relu(pixel_shuffle(x, r), 0.1)``: ``(N, C*r*r, H, W)`` -> ``(N, C, r*H, r*W)``.

    One module because a runtime may replace the pair with one fused kernel (``vsr.backends.cuda``).
    """

    def __init__(self, upscale: int = 2):
        super().__init__()
        self.upscale = upscale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _lrelu(F.pixel_shuffle(x, self.upscale))


class PCDAlignment(nn.Module):
    """Pyramid, cascading and deformable alignment.

    forward(nbr ``[L1 (B,C,H,W), L2 (B,C,H/2,W/2), L3 (B,C,H/4,W/4)]``, ref: same shapes) -> ``(B, C, H, W)``.
    """

    def __init__(self, num_feat: int = 64, deformable_groups: int = 8):
        super().__init__()
        self.offset_conv1 = nn.ModuleDict()
        self.offset_conv2 = nn.ModuleDict()
        self.offset_conv3 = nn.ModuleDict()
        self.dcn_pack = nn.ModuleDict()
        self.feat_conv = nn.ModuleDict()
        for i in (3, 2, 1):
            level = f"l{i}"
            self.offset_conv1[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
            if i == 3:
                self.offset_conv2[level] = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
            else:
                self.offset_conv2[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
                self.offset_conv3[level] = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
            self.dcn_pack[level] = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)
            if i < 3:
                self.feat_conv[level] = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
        self.cas_offset_conv1 = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
        self.cas_offset_conv2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.cas_dcnpack = DCNv2Pack(num_feat, num_feat, 3, padding=1, deformable_groups=deformable_groups)

    @staticmethod
    def _up2(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, nbr_feat_l: list[torch.Tensor], ref_feat_l: list[torch.Tensor]) -> torch.Tensor:
        up_offset = up_feat = None
        feat = None
        for i in (3, 2, 1):
            level = f"l{i}"
            offset = _lrelu(self.offset_conv1[level](torch.cat([nbr_feat_l[i - 1], ref_feat_l[i - 1]], dim=1)))
            if i == 3:
                offset = _lrelu(self.offset_conv2[level](offset))
            else:
                offset = _lrelu(self.offset_conv2[level](torch.cat([offset, up_offset], dim=1)))
                offset = _lrelu(self.offset_conv3[level](offset))
            feat = self.dcn_pack[level](nbr_feat_l[i - 1], offset)
            if i < 3:
                feat = self.feat_conv[level](torch.cat([feat, up_feat], dim=1))
            if i > 1:
                feat = _lrelu(feat)
                up_offset = self._up2(offset) * 2
                up_feat = self._up2(feat)
        offset = torch.cat([feat, ref_feat_l[0]], dim=1)
        offset = _lrelu(self.cas_offset_conv2(_lrelu(self.cas_offset_conv1(offset))))
        return _lrelu(self.cas_dcnpack(feat, offset))


class TSAFusion(nn.Module):
    """Temporal and spatial attention fusion: ``(N, T, C, H, W)`` -> ``(N, C, H, W)``."""

    def __init__(self, num_feat: int = 64, num_frame: int = 5, center_frame_idx: int = 2,
                 assembly: Assembly = Assembly()):
        super().__init__()
        self.center_frame_idx = center_frame_idx
        self.assembly = assembly
        self.temporal_attn1 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.temporal_attn2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.feat_fusion = nn.Conv2d(num_frame * num_feat, num_feat, 1, 1)
        self.max_pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg_pool = nn.AvgPool2d(3, stride=2, padding=1)
        self.spatial_attn1 = nn.Conv2d(num_frame * num_feat, num_feat, 1)
        self.spatial_attn2 = nn.Conv2d(num_feat * 2, num_feat, 1)
        self.spatial_attn3 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn4 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn5 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn_l1 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn_l2 = nn.Conv2d(num_feat * 2, num_feat, 3, 1, 1)
        self.spatial_attn_l3 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.spatial_attn_add1 = nn.Conv2d(num_feat, num_feat, 1)
        self.spatial_attn_add2 = nn.Conv2d(num_feat, num_feat, 1)

    @staticmethod
    def _up2(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)

    def temporal_attention(self, aligned_feat: torch.Tensor) -> torch.Tensor:
        """How much each frame agrees with the centre one: ``(N, T, C, H, W) -> (N, T, 1, H, W)`` in [0, 1]."""
        b, t, c, h, w = aligned_feat.shape
        embedding_ref = self.temporal_attn1(aligned_feat[:, self.center_frame_idx])
        embedding = self.temporal_attn2(aligned_feat.reshape(b * t, c, h, w)).view(b, t, c, h, w)
        if self.assembly.attention_sum_fp32:
            ref = embedding_ref.float()
            corr = torch.stack([(embedding[:, i].float() * ref).sum(dim=1) for i in range(t)], dim=1)
            return torch.sigmoid(corr).unsqueeze(2).to(aligned_feat.dtype)
        corr = (embedding * embedding_ref.unsqueeze(1)).sum(dim=2)  # (b, t, h, w)
        return torch.sigmoid(corr).unsqueeze(2)  # (b, t, 1, h, w)

    def weigh_frames(self, aligned_feat: torch.Tensor, corr_prob: torch.Tensor) -> torch.Tensor:
        """Each frame's features times its attention, the frames side by side: ``(N, T, C, H, W)``,
        ``(N, T, 1, H, W)`` -> ``(N, T*C, H, W)``; channels-last: the product goes straight into place."""
        b, t, c, h, w = aligned_feat.shape
        if not self.assembly.channels_last:
            return (aligned_feat * corr_prob).reshape(b, t * c, h, w)
        dtype = torch.promote_types(aligned_feat.dtype, corr_prob.dtype)
        out = _empty_like_layout((b, t * c, h, w), aligned_feat, dtype, True)
        torch.mul(aligned_feat, corr_prob, out=out.view(b, t, c, h, w))
        return out

    def forward(self, aligned_feat: torch.Tensor) -> torch.Tensor:
        corr_prob = self.temporal_attention(aligned_feat)
        aligned_feat = self.weigh_frames(aligned_feat, corr_prob)
        feat = _lrelu(self.feat_fusion(aligned_feat))
        attn = _lrelu(self.spatial_attn1(aligned_feat))
        attn = _lrelu(self.spatial_attn2(torch.cat([self.max_pool(attn), self.avg_pool(attn)], dim=1)))
        attn_level = _lrelu(self.spatial_attn_l1(attn))
        attn_level = torch.cat([self.max_pool(attn_level), self.avg_pool(attn_level)], dim=1)
        attn_level = _lrelu(self.spatial_attn_l2(attn_level))
        attn_level = self._up2(_lrelu(self.spatial_attn_l3(attn_level)))
        attn = _lrelu(self.spatial_attn3(attn)) + attn_level
        attn = self._up2(_lrelu(self.spatial_attn4(attn)))
        attn = self.spatial_attn5(attn)
        attn_add = self.spatial_attn_add2(_lrelu(self.spatial_attn_add1(attn)))
        return feat * torch.sigmoid(attn) * 2 + attn_add


class EDVR(nn.Module):
    """EDVR x4.  forward(x ``(N, T, 3, H, W)`` float in [0, 1], H and W multiples of 4) -> ``(N, 3, 4H, 4W)``."""

    scale = 4

    def __init__(self, num_in_ch: int = 3, num_out_ch: int = 3, num_feat: int = 64, num_frame: int = 5,
                 deformable_groups: int = 8, num_extract_block: int = 5, num_reconstruct_block: int = 10,
                 center_frame_idx: int | None = None, with_tsa: bool = True, assembly: Assembly = Assembly()):
        super().__init__()
        self.assembly = assembly
        self.num_frame = num_frame
        self.center_frame_idx = num_frame // 2 if center_frame_idx is None else center_frame_idx
        self.with_tsa = with_tsa
        self.conv_first = nn.Conv2d(num_in_ch, num_feat, 3, 1, 1)
        self.feature_extraction = nn.Sequential(*[ResidualBlockNoBN(num_feat) for _ in range(num_extract_block)])
        self.conv_l2_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l2_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.conv_l3_1 = nn.Conv2d(num_feat, num_feat, 3, 2, 1)
        self.conv_l3_2 = nn.Conv2d(num_feat, num_feat, 3, 1, 1)
        self.pcd_align = PCDAlignment(num_feat=num_feat, deformable_groups=deformable_groups)
        if with_tsa:
            self.fusion = TSAFusion(num_feat=num_feat, num_frame=num_frame, center_frame_idx=self.center_frame_idx,
                                    assembly=assembly)
        else:
            self.fusion = nn.Conv2d(num_frame * num_feat, num_feat, 1, 1)
        self.reconstruction = nn.Sequential(*[ResidualBlockNoBN(num_feat) for _ in range(num_reconstruct_block)])
        self.upconv1 = nn.Conv2d(num_feat, num_feat * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(num_feat, 64 * 4, 3, 1, 1)
        self.pixel_shuffle = PixelShuffleLReLU(2)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, num_out_ch, 3, 1, 1)

    def features(self, frames: torch.Tensor) -> list[torch.Tensor]:
        """Each frame's feature pyramid: ``(M, 3, H, W)`` -> ``[L1 (M, C, H, W), L2 (M, C, H/2, W/2),
        L3 (M, C, H/4, W/4)]``.  Per frame: a frame's pyramid does not depend on the others in ``frames``."""
        feat_l1 = self.feature_extraction(_lrelu(self.conv_first(frames)))
        feat_l2 = _lrelu(self.conv_l2_2(_lrelu(self.conv_l2_1(feat_l1))))
        feat_l3 = _lrelu(self.conv_l3_2(_lrelu(self.conv_l3_1(feat_l2))))
        return [feat_l1, feat_l2, feat_l3]

    def set_assembly(self, assembly: Assembly) -> None:
        """How this model (and its TSA) writes what it assembles (:class:`Assembly`)."""
        self.assembly = assembly
        if isinstance(self.fusion, TSAFusion):
            self.fusion.assembly = assembly

    def repeat_centre(self, f: torch.Tensor, b: int) -> torch.Tensor:
        """The reference features: each window's centre frame's, in place of each of its T frames: ``(b*T, C, H, W)``
        (window-major) -> the same shape, in ``f``'s layout where the assembly is channels-last."""
        t, ci = self.num_frame, self.center_frame_idx
        f5 = f.view(b, t, *f.shape[1:])
        if not self.assembly.channels_last:
            return f5[:, ci : ci + 1].expand(b, t, *f.shape[1:]).reshape(b * t, *f.shape[1:])
        out = torch.empty_like(f, memory_format=torch.channels_last)
        out.view(b, t, *f.shape[1:]).copy_(f5[:, ci:ci + 1])
        return out

    def stack_frames(self, aligned: torch.Tensor, b: int) -> torch.Tensor:
        """Each window's T aligned frames side by side (fusion without TSA): ``(b*T, C, H, W)`` ->
        ``(b, T*C, H, W)``; channels-last: stored ``(b, H, W, T*C)``."""
        t, (c, h, w) = self.num_frame, aligned.shape[1:]
        if not self.assembly.channels_last:
            return aligned.view(b, t * c, h, w)
        out = _empty_like_layout((b, t * c, h, w), aligned, aligned.dtype, True)
        out.view(b, t, c, h, w).copy_(aligned.view(b, t, c, h, w))
        return out

    def from_features(self, nbr: list[torch.Tensor], x_center: torch.Tensor) -> torch.Tensor:
        """The windows' pyramids ``[L1 (N*T, C, H, W), L2, L3]`` (window-major: row ``n*T + t`` is frame ``t``
        of window ``n``) and the centre frames ``(N, 3, H, W)`` -> ``(N, 3, 4H, 4W)``."""
        t = self.num_frame
        b, _, h, w = x_center.shape
        ref = [self.repeat_centre(f, b) for f in nbr]  # so that all T frames align in one batch
        aligned = self.pcd_align(nbr, ref)  # (b*t, C, h, w)
        nf = aligned.shape[1]
        if self.with_tsa:
            feat = self.fusion(aligned.view(b, t, nf, h, w))
        else:
            feat = self.fusion(self.stack_frames(aligned, b))
        out = self.reconstruction(feat)
        out = self.pixel_shuffle(self.upconv1(out))
        out = self.pixel_shuffle(self.upconv2(out))
        out = _lrelu(self.conv_hr(out))
        out = self.conv_last(out)
        base = F.interpolate(x_center, scale_factor=4, mode="bilinear", align_corners=False)
        return out + base

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c, h, w = x.shape
        x_center = x[:, self.center_frame_idx]
        return self.from_features(self.features(x.reshape(b * t, c, h, w)), x_center)
