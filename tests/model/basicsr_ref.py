"""An independent, deliberately plain re-statement of BasicSR's EDVR for checking vsr's model and export.

Written the way BasicSR's ``edvr_arch.py`` runs: PCD alignment called once per frame in a Python loop,
modules with inplace LeakyReLU, and a DCN written from the definition (explicit bilinear corner
gathers per tap), sharing no code with ``vsr.model``.
"""

import torch
import torch.nn.functional as F
from torch import nn


def naive_modulated_deform_conv(x, offset, mask, weight, bias, padding=1):
    """DCNv2 from its definition: for each tap, bilinear-sample with zero padding, modulate, accumulate."""
    n, c, h, w = x.shape
    co, _, kh, kw = weight.shape
    g = offset.shape[1] // (2 * kh * kw)
    cg = c // g
    out = torch.zeros(n, co, h, w, dtype=x.dtype)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=x.dtype), torch.arange(w, dtype=x.dtype), indexing="ij")
    flat = x.reshape(n, c, h * w)
    for gi in range(g):
        xs = flat[:, gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                k = i * kw + j
                dy = offset[:, 2 * (gi * kh * kw + k)]
                dx = offset[:, 2 * (gi * kh * kw + k) + 1]
                m = mask[:, gi * kh * kw + k]
                py = yy - padding + i + dy
                px = xx - padding + j + dx
                y0 = torch.floor(py)
                x0 = torch.floor(px)
                acc = torch.zeros(n, cg, h, w, dtype=x.dtype)
                for cy, wy in ((y0, 1 - (py - y0)), (y0 + 1, py - y0)):
                    for cx, wx in ((x0, 1 - (px - x0)), (x0 + 1, px - x0)):
                        valid = (cy >= 0) & (cy <= h - 1) & (cx >= 0) & (cx <= w - 1)
                        idx = (cy.clamp(0, h - 1) * w + cx.clamp(0, w - 1)).long().reshape(n, 1, h * w)
                        v = torch.gather(xs, 2, idx.expand(n, cg, h * w)).reshape(n, cg, h, w)
                        acc = acc + v * (wy * wx * valid).unsqueeze(1)
                acc = acc * m.unsqueeze(1)
                out = out + torch.einsum("oc,nchw->nohw", weight[:, gi * cg:(gi + 1) * cg, i, j], acc)
    return out + bias.view(1, -1, 1, 1)


class DCNv2Pack(nn.Module):
    def __init__(self, cin, cout, dg):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(cout, cin, 3, 3) * 0.05)
        self.bias = nn.Parameter(torch.randn(cout) * 0.05)
        self.conv_offset = nn.Conv2d(cin, dg * 3 * 9, 3, 1, 1)

    def forward(self, x, feat):
        out = self.conv_offset(feat)
        o1, o2, mask = torch.chunk(out, 3, dim=1)
        offset = torch.cat((o1, o2), dim=1)
        return naive_modulated_deform_conv(x, offset, torch.sigmoid(mask), self.weight, self.bias)


class ResidualBlockNoBN(nn.Module):
    def __init__(self, nf):
        super().__init__()
        self.conv1 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        return x + self.conv2(self.relu(self.conv1(x)))


class PCDAlignment(nn.Module):
    def __init__(self, nf, dg):
        super().__init__()
        self.offset_conv1, self.offset_conv2 = nn.ModuleDict(), nn.ModuleDict()
        self.offset_conv3, self.dcn_pack, self.feat_conv = nn.ModuleDict(), nn.ModuleDict(), nn.ModuleDict()
        for i in range(3, 0, -1):
            lv = f"l{i}"
            self.offset_conv1[lv] = nn.Conv2d(nf * 2, nf, 3, 1, 1)
            if i == 3:
                self.offset_conv2[lv] = nn.Conv2d(nf, nf, 3, 1, 1)
            else:
                self.offset_conv2[lv] = nn.Conv2d(nf * 2, nf, 3, 1, 1)
                self.offset_conv3[lv] = nn.Conv2d(nf, nf, 3, 1, 1)
            self.dcn_pack[lv] = DCNv2Pack(nf, nf, dg)
            if i < 3:
                self.feat_conv[lv] = nn.Conv2d(nf * 2, nf, 3, 1, 1)
        self.cas_offset_conv1 = nn.Conv2d(nf * 2, nf, 3, 1, 1)
        self.cas_offset_conv2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.cas_dcnpack = DCNv2Pack(nf, nf, dg)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)

    def forward(self, nbr, ref):
        up_off = up_feat = None
        for i in range(3, 0, -1):
            lv = f"l{i}"
            offset = self.lrelu(self.offset_conv1[lv](torch.cat([nbr[i - 1], ref[i - 1]], dim=1)))
            if i == 3:
                offset = self.lrelu(self.offset_conv2[lv](offset))
            else:
                offset = self.lrelu(self.offset_conv2[lv](torch.cat([offset, up_off], dim=1)))
                offset = self.lrelu(self.offset_conv3[lv](offset))
            feat = self.dcn_pack[lv](nbr[i - 1], offset)
            if i < 3:
                feat = self.feat_conv[lv](torch.cat([feat, up_feat], dim=1))
            if i > 1:
                feat = self.lrelu(feat)
                up_off = self.upsample(offset) * 2
                up_feat = self.upsample(feat)
        offset = torch.cat([feat, ref[0]], dim=1)
        offset = self.lrelu(self.cas_offset_conv2(self.lrelu(self.cas_offset_conv1(offset))))
        return self.lrelu(self.cas_dcnpack(feat, offset))


class TSAFusion(nn.Module):
    def __init__(self, nf, nframe, center):
        super().__init__()
        self.center = center
        self.temporal_attn1 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.temporal_attn2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.feat_fusion = nn.Conv2d(nframe * nf, nf, 1, 1)
        self.max_pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg_pool = nn.AvgPool2d(3, stride=2, padding=1)
        self.spatial_attn1 = nn.Conv2d(nframe * nf, nf, 1)
        self.spatial_attn2 = nn.Conv2d(nf * 2, nf, 1)
        self.spatial_attn3 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.spatial_attn4 = nn.Conv2d(nf, nf, 1)
        self.spatial_attn5 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.spatial_attn_l1 = nn.Conv2d(nf, nf, 1)
        self.spatial_attn_l2 = nn.Conv2d(nf * 2, nf, 3, 1, 1)
        self.spatial_attn_l3 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.spatial_attn_add1 = nn.Conv2d(nf, nf, 1)
        self.spatial_attn_add2 = nn.Conv2d(nf, nf, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)

    def forward(self, aligned):
        b, t, c, h, w = aligned.size()
        emb_ref = self.temporal_attn1(aligned[:, self.center].clone())
        emb = self.temporal_attn2(aligned.view(-1, c, h, w)).view(b, t, -1, h, w)
        corr_l = [torch.sum(emb[:, i] * emb_ref, 1).unsqueeze(1) for i in range(t)]
        corr_prob = torch.sigmoid(torch.cat(corr_l, dim=1)).unsqueeze(2).expand(b, t, c, h, w)
        aligned = aligned.view(b, -1, h, w) * corr_prob.contiguous().view(b, -1, h, w)
        feat = self.lrelu(self.feat_fusion(aligned))
        attn = self.lrelu(self.spatial_attn1(aligned))
        attn = self.lrelu(self.spatial_attn2(torch.cat([self.max_pool(attn), self.avg_pool(attn)], dim=1)))
        lvl = self.lrelu(self.spatial_attn_l1(attn))
        lvl = self.lrelu(self.spatial_attn_l2(torch.cat([self.max_pool(lvl), self.avg_pool(lvl)], dim=1)))
        lvl = self.upsample(self.lrelu(self.spatial_attn_l3(lvl)))
        attn = self.lrelu(self.spatial_attn3(attn)) + lvl
        attn = self.upsample(self.lrelu(self.spatial_attn4(attn)))
        attn = self.spatial_attn5(attn)
        attn_add = self.spatial_attn_add2(self.lrelu(self.spatial_attn_add1(attn)))
        return feat * torch.sigmoid(attn) * 2 + attn_add


class EDVRRef(nn.Module):
    def __init__(self, num_feat=64, num_frame=5, deformable_groups=8, num_extract_block=5,
                 num_reconstruct_block=10, with_tsa=True):
        super().__init__()
        nf = num_feat
        self.center = num_frame // 2
        self.with_tsa = with_tsa
        self.conv_first = nn.Conv2d(3, nf, 3, 1, 1)
        self.feature_extraction = nn.Sequential(*[ResidualBlockNoBN(nf) for _ in range(num_extract_block)])
        self.conv_l2_1 = nn.Conv2d(nf, nf, 3, 2, 1)
        self.conv_l2_2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_l3_1 = nn.Conv2d(nf, nf, 3, 2, 1)
        self.conv_l3_2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.pcd_align = PCDAlignment(nf, deformable_groups)
        self.fusion = TSAFusion(nf, num_frame, self.center) if with_tsa else nn.Conv2d(num_frame * nf, nf, 1, 1)
        self.reconstruction = nn.Sequential(*[ResidualBlockNoBN(nf) for _ in range(num_reconstruct_block)])
        self.upconv1 = nn.Conv2d(nf, nf * 4, 3, 1, 1)
        self.upconv2 = nn.Conv2d(nf, 64 * 4, 3, 1, 1)
        self.pixel_shuffle = nn.PixelShuffle(2)
        self.conv_hr = nn.Conv2d(64, 64, 3, 1, 1)
        self.conv_last = nn.Conv2d(64, 3, 3, 1, 1)
        self.lrelu = nn.LeakyReLU(negative_slope=0.1, inplace=True)

    def forward(self, x):
        b, t, c, h, w = x.size()
        x_center = x[:, self.center].contiguous()
        f1 = self.feature_extraction(self.lrelu(self.conv_first(x.view(-1, c, h, w))))
        f2 = self.lrelu(self.conv_l2_2(self.lrelu(self.conv_l2_1(f1))))
        f3 = self.lrelu(self.conv_l3_2(self.lrelu(self.conv_l3_1(f2))))
        f1, f2, f3 = f1.view(b, t, -1, h, w), f2.view(b, t, -1, h // 2, w // 2), f3.view(b, t, -1, h // 4, w // 4)
        ref = [f1[:, self.center].clone(), f2[:, self.center].clone(), f3[:, self.center].clone()]
        aligned = [self.pcd_align([f1[:, i].clone(), f2[:, i].clone(), f3[:, i].clone()], ref) for i in range(t)]
        aligned = torch.stack(aligned, dim=1)
        if not self.with_tsa:
            aligned = aligned.view(b, -1, h, w)
        out = self.reconstruction(self.fusion(aligned))
        out = self.lrelu(self.pixel_shuffle(self.upconv1(out)))
        out = self.lrelu(self.pixel_shuffle(self.upconv2(out)))
        out = self.conv_last(self.lrelu(self.conv_hr(out)))
        return out + F.interpolate(x_center, scale_factor=4, mode="bilinear", align_corners=False)


def randomise(model, seed):
    """Random weights; offset convolutions large enough to move samples by pixels, out of the image too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            fan = p[0].numel() if p.dim() > 1 else 1
            if "conv_offset" in name:
                b = 3.0 if name.endswith("bias") else 6.0 / fan**0.5
            else:
                b = 1.0 / fan**0.5 if p.dim() > 1 else 0.05
            p.uniform_(-b, b, generator=g)
    return model
