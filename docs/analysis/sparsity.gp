# attn-analyze plot; redraw with: cd docs/analysis && gnuplot sparsity.gp
set terminal svg size 1500,900 dynamic font 'Helvetica,11' noenhanced background rgb 'white'
set output 'sparsity.svg'
set datafile separator ','
set key autotitle columnhead
set grid
set key font ',9' samplen 2
set multiplot layout 2,3 title 'Sparsity S = E|a|/sqrt(E a^2): closed forms (lines) and attn''s kernels (points)'
Phi(x) = norm(x)
phi(x) = exp(-x*x/2)/sqrt(2*pi)
set ylabel 'S'
set key bottom left
set title 'softmax: exp(-sigma^2|q|^2/2)'
set xlabel 'sigma |q|'
set logscale y
set arrow 1 from 1.273, graph 0 to 1.273, graph 1 nohead dt 3 lc rgb 'gray40'
set label 1 'reach of 65536 keys' at 1.273, graph 0.92 offset 0.5,0 font ',9'
plot [0:3.1] exp(-x*x/2) lc rgb 'black' title 'closed form', 'sparsity_softmax.csv' using 3:(strcol(1) eq 'softmax' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#1f77b4' title 'measured', 'sparsity_beyond.csv' using 3:(strcol(1) eq 'softmax' ? $5 : 1/0) with points pt 6 ps 1 lc rgb '#1f77b4' title 'measured, beyond reach'
unset logscale y
unset arrow 1
unset label 1
set title 'plain linear: a = q.k + beta'
set xlabel 'beta / gamma'
plot [-3.2:3.2] [0.7:1.02] (sqrt(2/pi)*exp(-x*x/2) + x*erf(x/sqrt(2)))/sqrt(x*x+1) lc rgb 'black' title 'closed form', 'sparsity_linear.csv' using 3:(strcol(1) eq 'linear' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#d62728' title 'measured'
set title 'GAU: relu(q.k + beta)^2'
set xlabel 'beta / gamma'
plot [-2.2:3.2] [0:1] ((x*x+1)*Phi(x) + x*phi(x)) / sqrt((x**4 + 6*x*x + 3)*Phi(x) + (x**3 + 5*x)*phi(x)) lc rgb 'black' title 'closed form', 'sparsity_gau.csv' using 3:(strcol(1) eq 'gau' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#2ca02c' title 'measured', 'sparsity_beyond.csv' using 3:(strcol(1) eq 'gau' ? $5 : 1/0) with points pt 6 ps 1 lc rgb '#2ca02c' title 'measured, beyond reach'
set title 'non-negative linear: 1/sqrt(1 + (s|q~|_2/(mu|q~|_1))^2)'
set xlabel 'mu / s of the key features'
set logscale x
plot [0.1:10] [0:1] 1/0 notitle, 1/sqrt(1 + (0.470813/x)**2) lc rgb '#ff7f0e' title 'relu closed form', 'sparsity_nonneg.csv' using 3:(strcol(1) eq 'relu' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#ff7f0e' title 'relu', 1/sqrt(1 + (0.306277/x)**2) lc rgb '#9467bd' title 'elu1 closed form', 'sparsity_nonneg.csv' using 3:(strcol(1) eq 'elu1' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#9467bd' title 'elu1', 1/sqrt(1 + (0.343687/x)**2) lc rgb '#8c564b' title 'exp closed form', 'sparsity_nonneg.csv' using 3:(strcol(1) eq 'exp' ? $5 : 1/0):6 with yerrorbars pt 7 ps 0.8 lc rgb '#8c564b' title 'exp'
set title 'decay: a_j ~ lambda^(n-j), exact'
set xlabel 'n'
set logscale x 4
plot [1:5000] [0:1.05] 1/0 notitle, sqrt((1-0.5**x)*(1+0.5)/(x*(1-0.5)*(1+0.5**x))) lc rgb '#1f77b4' title 'lambda 0.5', 'sparsity_decay.csv' using 3:(strcol(1) eq 'decay 0.5' ? $5 : 1/0) with points pt 7 lc rgb '#1f77b4' notitle, sqrt((1-0.9**x)*(1+0.9)/(x*(1-0.9)*(1+0.9**x))) lc rgb '#d62728' title 'lambda 0.9', 'sparsity_decay.csv' using 3:(strcol(1) eq 'decay 0.9' ? $5 : 1/0) with points pt 7 lc rgb '#d62728' notitle, sqrt((1-0.99**x)*(1+0.99)/(x*(1-0.99)*(1+0.99**x))) lc rgb '#2ca02c' title 'lambda 0.99', 'sparsity_decay.csv' using 3:(strcol(1) eq 'decay 0.99' ? $5 : 1/0) with points pt 7 lc rgb '#2ca02c' notitle, sqrt((1-0.999**x)*(1+0.999)/(x*(1-0.999)*(1+0.999**x))) lc rgb '#ff7f0e' title 'lambda 0.999', 'sparsity_decay.csv' using 3:(strcol(1) eq 'decay 0.999' ? $5 : 1/0) with points pt 7 lc rgb '#ff7f0e' notitle
unset logscale
unset multiplot
