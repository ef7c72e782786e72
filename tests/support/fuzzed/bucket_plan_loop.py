"""A fuzzed program (441 tasks, two process groups) whose fourth bucket plan, as the search once built it,
could not be written: two buckets needed each other, and the writer followed their needs round the loop
without end. `f` is the program as generated; its group ``G`` is bound by `program`."""

import torch

from solvercast.models import fake_group

C = torch.ops._c10d_functional
G = None


def program():
    """(f, input shapes), ``G`` a fake group of 4 ranks."""
    global G
    G = fake_group(4, tag="fuzz")
    return f, [shape for _, shape in PARAMS]


def f(p0, p1, p2, p3, p4, p5, p6, p7, p8, p9, p10, p11, p12, p13, p14, p15, p16, p17, p18, p19, p20, p21, p22, p23, p24, p25, p26):
    c1 = C.all_gather_into_tensor(p1, 4, G)
    c2 = C.all_to_all_single(p1, [2, 2, 2, 2], [2, 2, 2, 2], G)
    w3 = C.wait_tensor(c2)
    v4 = w3.copy_(p1)
    c5 = C.reduce_scatter_tensor(v4, 'sum', 4, G)
    w6 = C.wait_tensor(c5)
    t7 = torch.var_mean(w6, 0, keepdim=True)
    v8 = t7[0]
    v9 = t7[1]
    v10 = torch.abs(w3)
    v11 = w6.clone()
    v12 = w6.mul_(0.5)
    v13 = torch.sub(v10, p2, out=w3)
    v14 = torch.tanh(p1 @ p3)
    v15 = p3 - p3
    v16 = v12.add_(0.25)
    v17 = v12[0:2]
    v18 = torch.relu(w6)
    c19 = C.reduce_scatter_tensor(v13, 'sum', 4, G)
    v20 = torch.mm(v15, p4) * 0.2041
    c21 = C.all_to_all_single(p3, [12, 12, 12, 12], [12, 12, 12, 12], G)
    v22 = p4.reshape(4, 24)
    c23 = C.all_gather_into_tensor(v22, 4, G)
    w24 = C.wait_tensor(c23)
    v25 = torch.mm(v17, v20) * 0.1443
    v26 = p1[:, 13:30]
    v27 = w24 * -1.0
    v28 = v20 * v20
    v29 = w24 - w24
    v30 = torch.mm(v22, p4) * 0.2041
    v31 = v26.to(torch.bfloat16).float()
    v32 = v27.reshape(24, 16)
    v33 = torch.nn.functional.silu(v29)
    v34 = p2[:, 29:35]
    w35 = C.wait_tensor(c21)
    v36 = v32.add_(0.25)
    w37 = C.wait_tensor(c19)
    v38 = w37.mul_(-1.0)
    v39 = v4.add_(v8)
    v40 = v38 * p5
    v41 = p5.view(1, 96)
    v42 = p5 - v40
    v43 = v38.copy_(v40)
    v44 = torch.tanh(p5 @ p3)
    v45 = v44 + v44
    v46 = v30.t()
    c47 = C.all_gather_into_tensor(v44, 4, G)
    w48 = C.wait_tensor(c47)
    v49 = v39 * 0.5
    v50 = torch.sigmoid(v42)
    v51 = torch.nn.functional.silu(v50)
    v52 = v51.pow(2)
    v53 = torch.mm(v36, v27) * 0.2500
    v54 = w48 * 0.5
    v55 = v51.pow(2)
    c56 = C.reduce_scatter_tensor(w48, 'sum', 4, G)
    v57 = -v55
    v58 = torch.cat([v51, v52], 0)
    v59 = v31.clone()
    c60 = C.reduce_scatter_tensor(v58, 'sum', 4, G)
    v61 = v52.add_(v12)
    t62 = torch.max(v61, 1, keepdim=True)
    v63 = t62[0]
    v64 = t62[1]
    v65 = torch.cat([v61, v57], 1)
    v66 = torch.mm(v33, v32) * 0.2041
    v67 = v58 * v9
    v68 = torch.addmm(v8, v63, p6)
    v69 = v63.add_(0.25)
    c70 = C.reduce_scatter_tensor(v58, 'sum', 4, G)
    v71 = v65 * v41
    v72 = v29.view(8, 48)
    w73 = C.wait_tensor(c60)
    v74 = w73 + p6
    v75 = v68.pow(2)
    c76 = C.reduce_scatter_tensor(v58, 'sum', 4, G)
    v77 = torch.cat([v75, v69], 1)
    v78 = w73 * v9
    w79 = C.wait_tensor(c56)
    v80 = torch.nn.functional.silu(v74)
    c81 = C.all_reduce_coalesced_([v75, v69], 'sum', G)
    c82 = c81[0]
    c83 = c81[1]
    w84 = C.wait_tensor(c82)
    w85 = C.wait_tensor(c83)
    v86 = (v78.to(torch.bfloat16) * 2).float()
    v87 = v86.relu_()
    v88 = torch.mm(w79, p4) * 0.2041
    v89 = torch.tanh(v88 @ p7)
    t90 = torch.max(v57, 1, keepdim=True)
    v91 = t90[0]
    v92 = t90[1]
    c93 = C.reduce_scatter_tensor(v67, 'sum', 4, G)
    v94 = torch.abs(v45)
    c95 = C.all_reduce_(v94, 'sum', G)
    w96 = C.wait_tensor(c95)
    v97 = p2 - v39
    c98 = C.all_reduce(v94, 'sum', G)
    v99 = v97.relu_()
    w100 = C.wait_tensor(c70)
    t101 = torch.max(w96, 1, keepdim=True)
    v102 = t101[0]
    v103 = v87.add_(v78)
    v104 = torch.tanh(v102 @ w100)
    v105 = torch.tanh(v17 @ p8)
    v106 = v103.t()
    v107 = torch.cat([p8, v46], 0)
    v108 = torch.ones(1, 48)
    v109 = torch.add(v103, p9, out=v108)
    v110 = (v72.to(torch.bfloat16) * 2).float()
    v111 = torch.empty(8, 4)
    v112 = torch.mm(v110, v20, out=v111)
    v113 = torch.nn.functional.silu(v110)
    v114 = torch.relu(p9)
    c115 = C.reduce_scatter_tensor(p8, 'sum', 4, G)
    w116 = C.wait_tensor(c115)
    v117 = -v109
    v118 = v117.t()
    v119 = v114.add_(v103)
    v120 = torch.mm(v119, p8) * 0.1443
    v121 = v117 + v117
    v122 = torch.tanh(v11 @ v28)
    v123 = v118 + v106
    v124 = torch.mm(v63, v114) * 1.0000
    v125 = v120.add_(0.25)
    c126 = C.all_reduce_coalesced([v123, w84], 'sum', G)
    c127 = c126[0]
    c128 = c126[1]
    v129 = v121 * 0.5
    v130 = torch.mm(v121, p10) * 0.1443
    v131 = torch.zeros(1, 12)
    v132 = torch.add(v130, v130, out=v131)
    v133 = torch.mm(v69, v121, out=v57)
    v134 = -v130
    w135 = C.wait_tensor(c98)
    v136 = w35.relu_()
    t137 = torch.max(v133, 1, keepdim=True)
    v138 = t137[0]
    v139 = t137[1]
    v140 = v134.add_(v132)
    v141 = torch.nn.functional.gelu(w135)
    c142 = C.reduce_scatter_tensor(v112, 'sum', 4, G)
    v143 = torch.mm(v69, v130) * 1.0000
    v144 = v136 + p3
    v145 = v141.clone()
    v146 = v138.clone()
    v147 = v141.view(1, 48)
    t148 = torch.var_mean(v147, 0, keepdim=True)
    v149 = t148[0]
    v150 = t148[1]
    v151 = (v149.to(torch.bfloat16) * 2).float()
    v152 = v151.add_(v149)
    c153 = C.all_gather_into_tensor(v150, 4, G)
    w154 = C.wait_tensor(c153)
    v155 = w154.reshape(48, 4)
    t156 = torch.max(v149, 1, keepdim=True)
    v157 = t156[0]
    v158 = t156[1]
    c159 = C.all_gather_into_tensor(v155, 4, G)
    v160 = v157.clone()
    t161 = torch.var_mean(v151, 0, keepdim=True)
    v162 = t161[0]
    v163 = t161[1]
    v164 = v88 + 0.5
    v165 = torch.softmax(v91, -1)
    v166 = v163 * v163
    c167 = C.all_reduce(v164, 'sum', G)
    c168 = C.all_gather_into_tensor(v160, 4, G)
    w169 = C.wait_tensor(c76)
    v170 = v138 + v91
    v171 = v107.add_(v120)
    t172 = torch.split(v164, 1)
    v173 = t172[0]
    v174 = v165.relu_()
    v175 = v171 - 0.5
    v176 = -v130
    c177 = C.all_reduce(v173, 'sum', G)
    v178 = torch.sigmoid(p7)
    v179 = v178 + v178
    v180 = torch.softmax(v173, -1)
    v181 = v178.t()
    v182 = torch.mm(v180, p7) * 0.5000
    v183 = v181 + v181
    v184 = torch.mm(v182, p11) * 0.2041
    v185 = torch.tanh(v182 @ p11)
    v186 = torch.mm(v136, p11) * 0.2041
    v187 = torch.tanh(p11 @ p12)
    v188 = v187.add_(0.5)
    c189 = C.all_gather_into_tensor(v186, 4, G)
    v190 = v188 * p12
    v191 = p12 + v187
    t192 = torch.split(v191, 3)
    v193 = t192[0]
    v194 = t192[1]
    v195 = t192[2]
    v196 = t192[3]
    v197 = t192[5]
    v198 = t192[6]
    v199 = t192[7]
    v200 = (v196.to(torch.bfloat16) * 2).float()
    v201 = torch.tanh(v197 @ p13)
    v202 = torch.relu(v199)
    v203 = torch.abs(v198)
    c204 = C.all_reduce_coalesced([v202, v10], 'sum', G)
    c205 = c204[0]
    c206 = c204[1]
    c207 = C.all_gather_into_tensor(p13, 4, G)
    c208 = C.all_reduce_(v200, 'sum', G)
    v209 = torch.addmm(v166, v202, p13)
    v210 = v199.clone()
    v211 = v210.pow(2)
    v212 = v201.sigmoid_()
    v213 = v210.transpose(0, 1)
    v214 = torch.tanh(v212 @ v136)
    c215 = C.reduce_scatter_tensor(p12, 'sum', 4, G)
    v216 = torch.mm(v213, v199) * 0.5774
    v217 = torch.nn.functional.gelu(v78)
    v218 = torch.nn.functional.silu(v213)
    v219 = v213.t()
    v220 = v13[2:4]
    v221 = v218 * v213
    v222 = torch.empty(8, 8)
    v223 = torch.mm(v221, v193, out=v222)
    c224 = C.all_reduce(v220, 'sum', G)
    v225 = v219 * v195
    v226 = torch.sigmoid(v219)
    c227 = C.reduce_scatter_tensor(p13, 'sum', 4, G)
    v228 = v220.view(1, 96)
    w229 = C.wait_tensor(c1)
    c230 = C.all_reduce(w229, 'sum', G)
    w231 = C.wait_tensor(c230)
    v232 = v223[0:6]
    v233 = v228 - 2.0
    t234 = torch.var_mean(w231, 0, keepdim=True)
    v235 = t234[0]
    v236 = t234[1]
    v237 = v235.add_(v236)
    v238 = torch.tanh(v232)
    w239 = C.wait_tensor(c167)
    v240 = v236.copy_(v166)
    v241 = v236.mul_(0.5)
    c242 = C.all_reduce_(v240, 'sum', G)
    w243 = C.wait_tensor(c242)
    v244 = torch.addmm(v117, v146, v240)
    v245 = torch.cat([v138, w239], 1)
    v246 = torch.tanh(v186 @ v190)
    v247 = torch.cat([v245, v245], 1)
    t248 = torch.max(v244, 1, keepdim=True)
    v249 = t248[0]
    v250 = t248[1]
    v251 = torch.mm(w169, v15) * 0.1443
    v252 = v244.add_(v220)
    w253 = C.wait_tensor(c168)
    c254 = C.reduce_scatter_tensor(v246, 'sum', 4, G)
    c255 = C.all_reduce_coalesced_([v247, v69], 'sum', G)
    c256 = c255[0]
    c257 = c255[1]
    c258 = C.all_reduce(w253, 'sum', G)
    v259 = torch.mm(v245, p14) * 0.4472
    v260 = p14 - p14
    w261 = C.wait_tensor(c208)
    v262 = w261.add_(p15)
    c263 = C.all_gather_into_tensor(v259, 4, G)
    v264 = v260 - 0.5
    v265 = w261.t()
    v266 = v264[0:1]
    v267 = v143 + v143
    v268 = torch.tanh(v266 @ p16)
    v269 = torch.tanh(p16 @ p17)
    v270 = v267.copy_(v143)
    v271 = torch.mm(v270, w116) * 0.2887
    v272 = (v269.to(torch.bfloat16) * 2).float()
    w273 = C.wait_tensor(c254)
    v274 = p17[:, 44:48]
    t275 = torch.max(v94, 1, keepdim=True)
    v276 = t275[0]
    v277 = torch.cat([v276, w253], 0)
    w278 = C.wait_tensor(c189)
    v279 = w35.add_(v118)
    v280 = torch.addmm(p18, v270, w273)
    v281 = torch.tanh(v209 @ v246)
    v282 = v280.pow(2)
    v283 = w278.t()
    v284 = torch.nn.functional.gelu(v283)
    v285 = v25 + v164
    v286 = v283.reshape(192, 24)
    c287 = C.all_reduce_(v285, 'sum', G)
    t288 = torch.var_mean(v280, 0, keepdim=True)
    v289 = torch.tanh(v286 @ v190)
    w290 = C.wait_tensor(c287)
    t291 = torch.var_mean(v236, 0, keepdim=True)
    v292 = t291[0]
    v293 = torch.mm(v59, p19) * 0.2425
    v294 = v292.add_(w243)
    v295 = v292 - v240
    v296 = torch.tanh(v198 @ v293)
    w297 = C.wait_tensor(c177)
    v298 = v295.transpose(0, 1)
    v299 = v89.view(1, 48)
    v300 = w3[0:8]
    v301 = torch.nn.functional.silu(v299)
    t302 = torch.split(v300, 1)
    v303 = t302[0]
    v304 = t302[1]
    v305 = t302[2]
    v306 = t302[4]
    v307 = t302[6]
    v308 = torch.tanh(v217 @ v298)
    v309 = torch.mm(v305, v155, out=v173)
    v310 = v306 + v306
    v311 = v198 * v281
    v312 = torch.tanh(v308 @ v309)
    v313 = v212 - v209
    v314 = v310.relu_()
    v315 = torch.tanh(v121 @ p8)
    v316 = v315.reshape(4, 1)
    v317 = torch.mm(v136, v188, out=v246)
    v318 = v313 + 1.5
    v319 = torch.abs(v313)
    v320 = v314.to(torch.bfloat16).float()
    v321 = torch.tanh(v315 @ v30)
    v322 = torch.tanh(v317 @ p20)
    v323 = torch.mm(v321, p21) * 0.5000
    v324 = -v323
    v325 = v322 - p22
    v326 = p0.to(torch.bfloat16).float()
    c327 = C.all_gather_into_tensor(v323, 4, G)
    w328 = C.wait_tensor(c327)
    w329 = C.wait_tensor(c227)
    v330 = torch.sub(v225, v311, out=v198)
    v331 = w329.pow(2)
    v332 = torch.addmm(v305, v325, w328)
    w333 = C.wait_tensor(c224)
    v334 = torch.mm(w333, p23) * 0.1443
    c335 = C.all_reduce_(v330, 'sum', G)
    v336 = torch.addmm(v321, w333, p22)
    v337 = v332.pow(2)
    v338 = v337.sigmoid_()
    v339 = torch.tanh(p23)
    v340 = v334 * 0.5
    v341 = v145.view(1, 48)
    v342 = v337.relu_()
    v343 = v184 - v251
    v344 = torch.addmm(p25, v342, p24)
    v345 = v342.t()
    v346 = torch.nn.functional.silu(v344)
    v347 = v346.mul_(-1.0)
    v348 = torch.softmax(v260, -1)
    v349 = v347.t()
    v350 = torch.addmm(v237, v86, v342)
    c351 = C.all_reduce_coalesced([v348, v334], 'sum', G)
    c352 = c351[0]
    c353 = c351[1]
    v354 = v349.to(torch.bfloat16).float()
    c355 = C.reduce_scatter_tensor(p24, 'sum', 4, G)
    v356 = torch.mm(v150, p26) * 0.1443
    v357 = v66 + v66
    w358 = C.wait_tensor(c93)
    w359 = C.wait_tensor(c205)
    w360 = C.wait_tensor(c206)
    w361 = C.wait_tensor(c127)
    w362 = C.wait_tensor(c128)
    w363 = C.wait_tensor(c142)
    w364 = C.wait_tensor(c207)
    w365 = C.wait_tensor(c159)
    w366 = C.wait_tensor(c215)
    w367 = C.wait_tensor(c256)
    w368 = C.wait_tensor(c257)
    w369 = C.wait_tensor(c335)
    w370 = C.wait_tensor(c258)
    w371 = C.wait_tensor(c263)
    w372 = C.wait_tensor(c352)
    w373 = C.wait_tensor(c353)
    w374 = C.wait_tensor(c355)
    return (w368, w372, v102, w366, w96, v198,)


PARAMS = [('p0', (64, 32)), ('p1', (8, 48)), ('p2', (8, 48)), ('p3', (48, 24)), ('p4', (24, 4)), ('p5', (2, 48)), ('p6', (1, 48)), ('p7', (4, 24)), ('p8', (48, 4)), ('p9', (1, 48)), ('p10', (48, 12)), ('p11', (24, 24)), ('p12', (24, 8)), ('p13', (8, 48)), ('p14', (5, 256)), ('p15', (3, 8)), ('p16', (256, 4)), ('p17', (4, 48)), ('p18', (1, 8)), ('p19', (17, 4)), ('p20', (8, 4)), ('p21', (4, 48)), ('p22', (48, 4)), ('p23', (48, 4)), ('p24', (48, 32)), ('p25', (1, 32)), ('p26', (48, 24))]
